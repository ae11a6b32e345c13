package main

import (
	"context"
	"testing"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/internal/devcore"
)

// The tests link SQLite whatever the tags, as a run built with
// -tags casebook_sqlite does; withoutSQLite gives a test the default
// binary's lack of it.
func init() {
	embeddedSQL = func(prefix string) (*devcore.SQL, error) { return devstack.OpenSQL(context.Background(), "", prefix) }
}

func withoutSQLite(t *testing.T) {
	t.Helper()
	saved := embeddedSQL
	embeddedSQL = nil
	t.Cleanup(func() { embeddedSQL = saved })
}
