package shortlink

import (
	"hash/maphash"
	"sync/atomic"
)

// memo remembers the answers of a pure function of a string — the
// analytics' classifiers of User-Agent and Referer headers, and the UTM
// parameters of destinations — in a fixed table of memoSlots entries, each
// holding the last key that hashed to it: lock-free, bounded (memoSlots
// entries of keys up to memoMaxKey bytes), and a repeated header, as most
// are, costs a hash and a compare instead of parsing.
type memo[V any] struct {
	seed  maphash.Seed
	slots [memoSlots]atomic.Pointer[memoEntry[V]]
	f     func(string) V
}

const (
	memoSlots  = 4096
	memoMaxKey = 512
)

type memoEntry[V any] struct {
	key string
	val V
}

func newMemo[V any](f func(string) V) *memo[V] {
	return &memo[V]{seed: maphash.MakeSeed(), f: f}
}

func (m *memo[V]) get(key string) V {
	if len(key) > memoMaxKey {
		return m.f(key)
	}
	slot := &m.slots[maphash.String(m.seed, key)%memoSlots]
	if e := slot.Load(); e != nil && e.key == key {
		return e.val
	}
	v := m.f(key)
	slot.Store(&memoEntry[V]{key: key, val: v})
	return v
}
