// A module of its own, so that casebook's module does not depend on podium:
// the peer comparison in rank/doc.go. The Go module proxy refuses podium
// (403), so its source is a local copy; see README.md here.
module github.com/casebook-dev/casebook/benchmarks/peers/podium

go 1.26.0

require (
	github.com/casebook-dev/casebook v0.0.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/topfreegames/podium/leaderboard/v2 v2.0.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dgryski/go-rendezvous v0.0.0-20200823014737-9f7001d12a5f // indirect
	github.com/go-json-experiment/json v0.0.0-20260213210345-44df1a37e875 // indirect
	github.com/go-logr/logr v1.4.4 // indirect
	github.com/go-logr/stdr v1.2.2 // indirect
	github.com/go-redis/redis/v8 v8.11.5 // indirect
	github.com/golang/mock v1.6.0 // indirect
	github.com/jmoiron/sqlx v1.4.0 // indirect
	go.opentelemetry.io/auto/sdk v1.2.1 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/log v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sync v0.25.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

replace (
	github.com/casebook-dev/casebook => ../../..
	github.com/topfreegames/podium/leaderboard/v2 => ./podium-src/leaderboard
)
