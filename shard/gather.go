package shard

import (
	"container/heap"
	"context"

	"golang.org/x/sync/errgroup"
)

// Gather runs query on every shard, at most parallel at once (0: all at
// once), and merges the per-shard results — each of which must already be
// sorted by less — into one slice sorted by less, cut to limit items
// (limit ≤ 0: no limit). Ties keep shard order. The first error cancels the
// queries still running and is returned.
//
// A query that can push the limit down ("ORDER BY … LIMIT n" on each shard)
// should: Gather only merges.
func Gather[T any](ctx context.Context, shards []Shard, parallel int,
	query func(ctx context.Context, s Shard) ([]T, error),
	less func(a, b T) bool, limit int) ([]T, error) {
	results := make([][]T, len(shards))
	g, gctx := errgroup.WithContext(ctx)
	if parallel > 0 {
		g.SetLimit(parallel)
	}
	for i, s := range shards {
		g.Go(func() error {
			rows, err := query(gctx, s)
			results[i] = rows
			return err
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return Merge(results, less, limit), nil
}

// Merge is a k-way merge of lists, each sorted by less, into one sorted list
// of at most limit items (limit ≤ 0: all), through a heap of list heads:
// O(limit × log(len(lists))). Ties keep list order.
func Merge[T any](lists [][]T, less func(a, b T) bool, limit int) []T {
	h := &heads[T]{less: less}
	total := 0
	for i, l := range lists {
		total += len(l)
		if len(l) > 0 {
			h.items = append(h.items, head{list: i})
		}
	}
	h.lists = lists
	heap.Init(h)
	if limit <= 0 || limit > total {
		limit = total
	}
	out := make([]T, 0, limit)
	for len(out) < limit {
		top := &h.items[0]
		out = append(out, lists[top.list][top.pos])
		top.pos++
		if top.pos == len(lists[top.list]) {
			heap.Pop(h)
		} else {
			heap.Fix(h, 0)
		}
	}
	return out
}

type head struct{ list, pos int }

type heads[T any] struct {
	items []head
	lists [][]T
	less  func(a, b T) bool
}

func (h *heads[T]) Len() int { return len(h.items) }
func (h *heads[T]) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	x, y := h.lists[a.list][a.pos], h.lists[b.list][b.pos]
	if h.less(x, y) {
		return true
	}
	if h.less(y, x) {
		return false
	}
	return a.list < b.list
}
func (h *heads[T]) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *heads[T]) Push(x any)    { h.items = append(h.items, x.(head)) }
func (h *heads[T]) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}
