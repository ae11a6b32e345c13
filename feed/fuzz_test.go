package feed_test

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/outbox"
)

func FuzzCursor(f *testing.F) {
	key := []byte("a deployment's cursor secret")
	f.Add(feed.EncodeCursor(nil, "r", 1764480000000123, 8388617), false)
	f.Add(feed.EncodeCursor(key, "r", 1764480000000123, 8388617), true)
	f.Add("", false)
	f.Add("AQAAAAAAAAABAAAAAAAAAAE", false)
	f.Add("AQAAAAAAAAABAAAAAAAAAAF", false) // non-canonical trailing bits
	f.Fuzz(func(t *testing.T, c string, keyed bool) {
		k := key
		if !keyed {
			k = nil
		}
		score, id, err := feed.DecodeCursor(k, "r", c)
		if err != nil {
			if !errors.Is(err, feed.ErrCursor) {
				t.Fatalf("%q: %v is not ErrCursor", c, err)
			}
			return
		}
		if score <= 0 || id <= 0 {
			t.Fatalf("%q decoded to (%d, %d)", c, score, id)
		}
		if again := feed.EncodeCursor(k, "r", score, id); again != c {
			t.Fatalf("%q re-encodes as %q: two texts for one position", c, again)
		}
		if keyed {
			if _, _, err := feed.DecodeCursor(k, "another reader", c); !errors.Is(err, feed.ErrCursor) {
				t.Fatalf("%q, made for r, read for another reader: %v", c, err)
			}
		}
	})
}

func FuzzChunk(f *testing.F) {
	good, _ := json.Marshal(feed.Chunk{V: 1, Post: 42, Author: "alice", Score: 1764480000000123, Followers: []string{"bob", "carol"}})
	f.Add(good)
	f.Add([]byte(`{"v":2,"post":1,"author":"a","score":1,"followers":["b"]}`))
	f.Add([]byte(`{"v":1,"post":1,"author":"a","score":1,"followers":[]}`))
	f.Add([]byte(`{"v":1,"post":1,"author":"a","score":1,"followers":["b"],"x":1}`))
	f.Add([]byte(`{"v":1,"post":1,"author":"a","score":1,"followers":["b"]} {}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, v []byte) {
		c, err := feed.DecodeChunk(v)
		if err != nil {
			if !errors.Is(err, feed.ErrBadMessage) || !errors.Is(err, outbox.ErrPoison) {
				t.Fatalf("%q: %v is not a poison ErrBadMessage", v, err)
			}
			return
		}
		if c.V != feed.ChunkVersion || c.Post <= 0 || c.Score <= 0 || len(c.Followers) == 0 {
			t.Fatalf("%q accepted as %+v", v, c)
		}
		again, _ := json.Marshal(c)
		if c2, err := feed.DecodeChunk(again); err != nil || c2.Post != c.Post || len(c2.Followers) != len(c.Followers) {
			t.Fatalf("%q does not round-trip: %v", v, err)
		}
	})
}
