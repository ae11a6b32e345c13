package signin_test

import (
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/signin"
)

// Reward messages from Kafka: never a panic; an accepted task round-trips
// and is one the ledger can store.
func FuzzDecodeTask(f *testing.F) {
	f.Add(signin.EncodeTask(signin.Task{User: "ann", Date: "2026-11-30", Kind: "daily", Points: 10}))
	f.Add([]byte(`{"v":1,"user":"ünï","date":"2026-02-30","kind":"daily","points":10}`))
	f.Add([]byte(`{"v":1,"points":"10"}`))
	f.Fuzz(func(t *testing.T, value []byte) {
		task, err := signin.DecodeTask(value)
		if err != nil {
			if !errors.Is(err, signin.ErrBadTask) {
				t.Fatalf("error without ErrBadTask: %v", err)
			}
			return
		}
		if back, err := signin.DecodeTask(signin.EncodeTask(task)); err != nil || back != task {
			t.Fatalf("%+v does not round-trip: %+v %v", task, back, err)
		}
	})
}
