// Package luascript runs many Lua script calls in one pipeline.
//
// go-redis' Script.Run falls back from EVALSHA to EVAL for one call; a
// pipeline of EVALSHAs has no such fallback, and a script cache is empty
// after a restart or a failover. RunAll sends every call as EVALSHA and
// re-sends, as EVAL, only the calls that came back NOSCRIPT.
package luascript

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Call is one script invocation.
type Call struct {
	Script *redis.Script
	Keys   []string
	Args   []any
}

// Pipeliner is the narrow client RunAll needs; *redis.Client,
// *redis.ClusterClient and redis.UniversalClient satisfy it (a cluster
// pipeline sends each call to its key's node).
type Pipeliner interface {
	Pipeline() redis.Pipeliner
}

// RunAll runs calls in one pipeline and returns one command per call, in
// order. The error is the pipeline's first error; inspect each command for
// its own.
func RunAll(ctx context.Context, c Pipeliner, calls []Call) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	pipe := c.Pipeline()
	for i, call := range calls {
		cmds[i] = call.Script.EvalSha(ctx, pipe, call.Keys, call.Args...)
	}
	pipe.Exec(ctx) // errors are read per command below
	var retry []int
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			retry = append(retry, i)
		}
	}
	if len(retry) > 0 {
		pipe = c.Pipeline()
		for _, i := range retry {
			cmds[i] = calls[i].Script.Eval(ctx, pipe, calls[i].Keys, calls[i].Args...)
		}
		pipe.Exec(ctx)
	}
	for _, cmd := range cmds {
		if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
			return cmds, err
		}
	}
	return cmds, nil
}
