package notify_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/feed/notify"
)

// Three people like Alice's post, one of them twice, and a fourth
// comments: Alice sees two groups, newest first, then reads them.
func Example() {
	ctx := context.Background()
	r, err := devstack.OpenRedis(ctx, os.Getenv(devstack.EnvRedisAddr))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer r.Close()
	ns := "example:" + devstack.RandomHex(4)
	defer devstack.DeleteKeys(ctx, r.Client, ns+"*")
	start := time.Now().Truncate(24 * time.Hour) // the start of today's window (UTC)
	now := start
	f, err := notify.New(r.Client, notify.Config{Namespace: ns, Now: func() time.Time { return now }})
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, actor := range []string{"bob", "carol", "bob", "dan"} {
		now = start.Add(time.Duration(i) * time.Minute)
		a := notify.Activity{ID: fmt.Sprint("like-", i), Actor: actor, Verb: "like", Object: "post:42", Target: "alice", Time: now}
		if err := f.Add(ctx, a); err != nil {
			fmt.Println(err)
			return
		}
		f.Add(ctx, a) // a redelivery changes nothing
	}
	f.Add(ctx, notify.Activity{ID: "c-1", Actor: "erin", Verb: "comment", Object: "post:42", Target: "alice", Time: now})

	page, _ := f.Groups(ctx, "alice", "", 10)
	for _, g := range page.Groups {
		fmt.Printf("%s %s: %d (%v), seen %v\n", g.Verb, g.Object, g.ActorCount, g.Actors, g.Seen)
	}
	c, _ := f.Counts(ctx, "alice")
	fmt.Printf("unseen %d, unread %d\n", c.Unseen, c.Unread)
	c, _ = f.MarkSeen(ctx, "alice")
	fmt.Printf("unseen %d, unread %d\n", c.Unseen, c.Unread)
	c, _ = f.MarkRead(ctx, "alice", page.Groups[0].ID)
	fmt.Printf("unseen %d, unread %d\n", c.Unseen, c.Unread)
	// Output:
	// comment post:42: 1 ([erin]), seen false
	// like post:42: 3 ([bob carol dan]), seen false
	// unseen 2, unread 2
	// unseen 0, unread 2
	// unseen 0, unread 1
}
