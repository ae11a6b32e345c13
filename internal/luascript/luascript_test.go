package luascript_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/casebook-dev/casebook/internal/keys"
	"github.com/casebook-dev/casebook/internal/luascript"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// A fresh script (never loaded on any node) still runs, pipelined, on the
// cluster, each call on its own key's node; a second round hits EVALSHA.
func TestRunAllLoadsScriptsOnDemand(t *testing.T) {
	testenv.EachRedis(t, func(t *testing.T, r *testenv.Redis) {
		ctx := context.Background()
		// A unique body makes a script no server has cached.
		s := redis.NewScript(fmt.Sprintf("-- %s\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])", r.Namespace))
		sp := keys.NewSpace(r.Namespace)
		for round := 1; round <= 2; round++ {
			var calls []luascript.Call
			for i := range 50 {
				calls = append(calls, luascript.Call{Script: s, Keys: []string{sp.Key(fmt.Sprint(i))}, Args: []any{i}})
			}
			cmds, err := luascript.RunAll(ctx, r.Client, calls)
			if err != nil {
				t.Fatal(err)
			}
			for i, cmd := range cmds {
				if v, _ := cmd.Int64(); v != int64(round*i) {
					t.Fatalf("round %d call %d = %d, want %d", round, i, v, round*i)
				}
			}
		}
	})
}

func TestRunAllReportsScriptErrors(t *testing.T) {
	r := testenv.NewRedis(t)
	s := redis.NewScript("return redis.error_reply('nope ' .. ARGV[1])")
	cmds, err := luascript.RunAll(context.Background(), r.Client, []luascript.Call{{Script: s, Keys: []string{r.Namespace + ":x"}, Args: []any{"1"}}})
	if err == nil || cmds[0].Err() == nil || err.Error() != "nope 1" {
		t.Fatalf("err = %v", err)
	}
}
