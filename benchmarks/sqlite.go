//go:build casebook_sqlite

package main

import (
	"context"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/devcore"
)

// With -tags casebook_sqlite, a run without MySQL measures on SQLite.
func init() {
	embeddedSQL = func(prefix string) (*devcore.SQL, error) { return devstack.OpenSQL(context.Background(), "", prefix) }
}
