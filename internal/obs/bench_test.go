package obs_test

import (
	"context"
	"testing"

	"github.com/casebook-dev/casebook/internal/obs"
)

// BenchmarkOpUninstalled: Start and End of an operation while no provider
// is installed — what every instrumented call pays in a service that set
// OpenTelemetry up nowhere. (Run it alone: TestGlobalProviders installs
// providers, for good, in the same binary.)
func BenchmarkOpUninstalled(b *testing.B) {
	ctx := context.Background()
	op := obs.NewBlock("bench", nil, nil).Op("op", nil)
	b.ReportAllocs()
	for b.Loop() {
		_, call := op.Start(ctx)
		call.End(nil)
	}
}
