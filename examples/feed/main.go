// Command feed serves a news feed over HTTP on a Redis Cluster and sharded
// SQL, with fan-out through Kafka:
//
//	POST /users/{id}/posts              body: the post text → {"id":…}
//	POST /users/{id}/follow/{other}
//	GET  /users/{id}/timeline?cursor=   → {"posts":[…],"next":"…"}
//	GET  /users/{id}/posts?cursor=      → the profile: {"posts":[…],"next":"…"}
//	POST /users/{id}/mute/{other}       (and /unmute/{other})
//	POST /users/{id}/likes/{post}       a like: the author is notified through Kafka
//	GET  /users/{id}/notifications      → {"groups":[…],"next":"…","counts":{"unseen":…,"unread":…}}
//	POST /users/{id}/notifications/seen → the new counts (and /read)
//
// It first seeds a social graph (-users, default 100,000) whose follower
// counts follow a power law (user i has about 0.9×users/(i+1) followers:
// user 0 nine in ten of everyone, so 100k+ followers needs -users ≥ 112k,
// and a few users have them at -users 1M), with multi-row
// inserts, then serves. -duration stops it after a while; -selfcheck makes
// a few requests against itself and exits 1 if one is wrong.
//
//	go run ./examples/feed -users 2000 -selfcheck
//
// Embedded defaults: a spawned Redis Cluster (one embedded Redis without
// the redis-server binary), kfake, 4 SQLite files. Real servers:
// CASEBOOK_REDIS_CLUSTER or CASEBOOK_REDIS_ADDR, CASEBOOK_KAFKA_BROKERS,
// CASEBOOK_MYSQL_DSN.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/IBM/sarama"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/feed"
	"github.com/casebook-dev/casebook/feed/notify"
	"github.com/casebook-dev/casebook/kafka"
	"github.com/casebook-dev/casebook/outbox"
)

func main() { devstack.Run(run) }

func run(ctx context.Context) error {
	users := flag.Int("users", 100_000, "users in the seeded social graph")
	addr := flag.String("addr", "127.0.0.1:8080", "listen address")
	duration := flag.Duration("duration", 0, "stop after this long (0: until interrupted)")
	selfcheck := flag.Bool("selfcheck", false, "make a few requests against the server and exit")
	flag.Parse()
	if *users < 10 {
		return errors.New("-users must be at least 10")
	}

	st, err := devstack.OpenSharded(ctx, devstack.FromEnv(), "casebook_feed", 4, os.Stderr)
	if err != nil {
		return err
	}
	defer st.Close()
	r, k, sqls, dbs := st.Redis, st.Kafka, st.SQLs, st.DBs()

	ns := "casebook-example-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	defer devstack.DeleteKeys(context.WithoutCancel(ctx), r.Client, ns+"*")
	svc, err := feed.New(r.Client, dbs, feed.Config{Namespace: ns, TablesPerDB: 64})
	if err != nil {
		return err
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		return err
	}
	notes, err := notify.New(r.Client, notify.Config{Namespace: ns})
	if err != nil {
		return err
	}
	start := time.Now()
	edges, err := seed(ctx, svc, *users)
	if err != nil {
		return err
	}
	fmt.Printf("seeded %d users, %d follows in %v on %s Redis (%d node(s)), %s × %d\n",
		*users, edges, time.Since(start).Round(time.Millisecond), r.Kind, len(r.Addrs), sqls[0].Kind, len(sqls))

	// Fan-out: the relay turns new posts into chunk messages on Kafka, the
	// consumer pushes them into inboxes.
	topic := "feed-chunks-" + ns
	if err := kafka.CreateTopic(k.Brokers, topic, 8); err != nil {
		return err
	}
	// Notifications: a like is an activity on its own topic, applied to the
	// author's notification groups once by its id (a repeated like, or a
	// redelivery, changes nothing).
	likes := "feed-likes-" + ns
	if err := kafka.CreateTopic(k.Brokers, likes, 4); err != nil {
		return err
	}
	pub, err := kafka.Dial(k.Brokers, "feed-relay")
	if err != nil {
		return err
	}
	defer pub.Close()
	group, err := sarama.NewConsumerGroup(k.Brokers, "feed-push-"+ns, kafka.Config("feed-push"))
	if err != nil {
		return err
	}
	defer group.Close()
	consumer, err := kafka.NewConsumer(group, []string{topic}, svc.HandleChunk, kafka.ConsumerConfig{})
	if err != nil {
		return err
	}
	likeGroup, err := sarama.NewConsumerGroup(k.Brokers, "feed-notify-"+ns, kafka.Config("feed-notify"))
	if err != nil {
		return err
	}
	defer likeGroup.Close()
	notifier, err := kafka.NewConsumer(likeGroup, []string{likes}, notes.Handle, kafka.ConsumerConfig{})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if *duration > 0 {
		ctx, cancel = context.WithTimeout(ctx, *duration)
		defer cancel()
	}
	done := make(chan struct{}, 4)
	go func() { consumer.Run(ctx); done <- struct{}{} }()
	go func() { notifier.Run(ctx); done <- struct{}{} }()
	go func() { relay(ctx, svc, pub, topic); done <- struct{}{} }()

	srv := &http.Server{
		Handler:           routes(svc, notes, pub, likes),
		ReadHeaderTimeout: 2 * time.Second,
		ReadTimeout:       5 * time.Second,
		WriteTimeout:      5 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	go func() { srv.Serve(ln); done <- struct{}{} }()
	fmt.Printf("serving on http://%s\n", ln.Addr())

	var checkErr error
	if *selfcheck {
		checkErr = check(ctx, "http://"+ln.Addr().String())
		if checkErr == nil {
			fmt.Println("self-check passed")
		}
		cancel()
	}
	<-ctx.Done()
	shut, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	srv.Shutdown(shut)
	for range 4 {
		<-done
	}
	return checkErr
}

// relay fans out new posts every 20 ms until ctx ends.
func relay(ctx context.Context, svc *feed.Service, pub *kafka.Publisher, topic string) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := svc.RelayFanout(ctx, pub, topic, 100); err != nil && ctx.Err() == nil {
				fmt.Fprintln(os.Stderr, "relay:", err)
			}
		}
	}
}

// seed follows a power law: user i has about 0.9×n/(i+1) followers (Zipf
// with exponent 1: user 0 is followed by 90% of everyone, user 9 by 9%, the
// tail by none or one; with -users 1000000 the top eight have 100k+), the
// followers of i being the users after it, so no pair repeats. Rows go in
// with multi-row inserts (SeedFollows).
func seed(ctx context.Context, svc *feed.Service, n int) (int, error) {
	var follows [][2]string
	for i := range n {
		want := min(n-1, int(math.Round(0.9*float64(n)/float64(i+1))))
		for j := 1; j <= want; j++ {
			follows = append(follows, [2]string{name((i + j) % n), name(i)})
		}
	}
	return len(follows), svc.SeedFollows(ctx, follows)
}

func name(i int) string { return "u" + strconv.Itoa(i) }

func routes(svc *feed.Service, notes *notify.Feed, pub *kafka.Publisher, likes string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /users/{id}/posts", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, 8<<10))
		if err != nil {
			http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
			return
		}
		req := r.Header.Get("Idempotency-Key")
		if req == "" {
			req = strconv.FormatUint(rand.Uint64(), 36)
		}
		p, err := svc.Publish(r.Context(), feed.PublishRequest{Author: r.PathValue("id"), RequestID: req, Body: string(body)})
		reply(w, map[string]any{"id": p.ID}, err)
	})
	mux.HandleFunc("POST /users/{id}/follow/{other}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"ok": true}, svc.Follow(r.Context(), r.PathValue("id"), r.PathValue("other")))
	})
	mux.HandleFunc("GET /users/{id}/timeline", func(w http.ResponseWriter, r *http.Request) {
		p, err := svc.Timeline(r.Context(), r.PathValue("id"), r.URL.Query().Get("cursor"), 20)
		reply(w, map[string]any{"posts": p.Posts, "next": p.Next}, err)
	})
	mux.HandleFunc("GET /users/{id}/posts", func(w http.ResponseWriter, r *http.Request) {
		p, err := svc.AuthorPosts(r.Context(), r.PathValue("id"), r.URL.Query().Get("cursor"), 20)
		reply(w, map[string]any{"posts": p.Posts, "next": p.Next}, err)
	})
	mux.HandleFunc("POST /users/{id}/mute/{other}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"ok": true}, svc.Mute(r.Context(), r.PathValue("id"), r.PathValue("other")))
	})
	mux.HandleFunc("POST /users/{id}/unmute/{other}", func(w http.ResponseWriter, r *http.Request) {
		reply(w, map[string]any{"ok": true}, svc.Unmute(r.Context(), r.PathValue("id"), r.PathValue("other")))
	})
	// A like names the post; its author, read from the feed, is notified.
	// (A service would record the like and its activity in one transaction
	// through an outbox; the example publishes directly.)
	mux.HandleFunc("POST /users/{id}/likes/{post}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("post"), 10, 64)
		if err != nil {
			reply(w, nil, fmt.Errorf("%w: post id %q", feed.ErrInvalid, r.PathValue("post")))
			return
		}
		p, err := svc.Post(r.Context(), id)
		if errors.Is(err, feed.ErrNotFound) {
			http.Error(w, `{"error":"no such post"}`, http.StatusNotFound)
			return
		}
		if err != nil {
			reply(w, nil, err)
			return
		}
		a := notify.Activity{ID: "like:" + r.PathValue("post") + ":" + r.PathValue("id"), Actor: r.PathValue("id"),
			Verb: "like", Object: "post:" + r.PathValue("post"), Target: p.Author, Time: time.Now()}
		v, err := notify.Encode(a)
		if err != nil {
			reply(w, nil, fmt.Errorf("%w: %v", feed.ErrInvalid, err))
			return
		}
		err = pub.Publish(r.Context(), []outbox.Message{{Topic: likes, Key: []byte(a.Target), Value: v}})
		reply(w, map[string]any{"ok": true}, err)
	})
	mux.HandleFunc("GET /users/{id}/notifications", func(w http.ResponseWriter, r *http.Request) {
		p, err := notes.Groups(r.Context(), r.PathValue("id"), r.URL.Query().Get("cursor"), 20)
		if err != nil {
			reply(w, nil, notifyErr(err))
			return
		}
		c, err := notes.Counts(r.Context(), r.PathValue("id"))
		reply(w, map[string]any{"groups": p.Groups, "next": p.Next, "counts": c}, notifyErr(err))
	})
	mux.HandleFunc("POST /users/{id}/notifications/{mark}", func(w http.ResponseWriter, r *http.Request) {
		mark := notes.MarkSeen
		switch r.PathValue("mark") {
		case "seen":
		case "read":
			mark = notes.MarkRead
		default:
			http.NotFound(w, r)
			return
		}
		c, err := mark(r.Context(), r.PathValue("id"))
		reply(w, c, notifyErr(err))
	})
	return mux
}

// notifyErr maps notify's bad input onto the feed's, for reply.
func notifyErr(err error) error {
	if errors.Is(err, notify.ErrInvalid) {
		return fmt.Errorf("%w: %v", feed.ErrInvalid, err)
	}
	return err
}

func reply(w http.ResponseWriter, v any, err error) {
	w.Header().Set("Content-Type", "application/json")
	switch {
	case errors.Is(err, feed.ErrInvalid), errors.Is(err, feed.ErrCursor):
		w.WriteHeader(http.StatusBadRequest)
		v = map[string]string{"error": err.Error()}
	case errors.Is(err, feed.ErrBlocked):
		w.WriteHeader(http.StatusForbidden)
		v = map[string]string{"error": err.Error()}
	case err != nil:
		w.WriteHeader(http.StatusInternalServerError)
		v = map[string]string{"error": err.Error()}
	}
	json.NewEncoder(w).Encode(v)
}

// check: a reader follows an author, reads (becoming active), the author
// posts, and the post reaches the reader's timeline through Kafka and the
// author's profile; muting the author hides it from the timeline and
// unmuting shows it again; a bad cursor is a 400.
func check(ctx context.Context, base string) error {
	c := &http.Client{Timeout: 5 * time.Second}
	do := func(method, path, body string) (int, map[string]any, error) {
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		res, err := c.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		var out map[string]any
		b, _ := io.ReadAll(res.Body)
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber() // post ids do not fit a float64 exactly
		d.Decode(&out)
		return res.StatusCode, out, nil
	}
	if code, _, err := do("POST", "/users/checker/follow/u1", ""); err != nil || code != 200 {
		return fmt.Errorf("follow: %d %v", code, err)
	}
	if code, _, err := do("GET", "/users/checker/timeline", ""); err != nil || code != 200 {
		return fmt.Errorf("timeline: %d %v", code, err)
	}
	code, posted, err := do("POST", "/users/u1/posts", "hello from u1")
	if err != nil || code != 200 {
		return fmt.Errorf("post: %d %v", code, err)
	}
	id := fmt.Sprint(posted["id"])
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		_, tl, err := do("GET", "/users/checker/timeline", "")
		if err != nil {
			return err
		}
		posts, _ := tl["posts"].([]any)
		for _, p := range posts {
			if m, _ := p.(map[string]any); fmt.Sprint(m["id"]) == id {
				fmt.Printf("post %s reached the follower's timeline\n", id)
				if code, _, _ := do("GET", "/users/checker/timeline?cursor=nonsense", ""); code != 400 {
					return fmt.Errorf("a bad cursor gave %d, want 400", code)
				}
				if err := checkProfileAndMute(do, id); err != nil {
					return err
				}
				return checkNotifications(ctx, do, id)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("post %s did not reach the timeline", id)
}

// checkProfileAndMute: post id is on u1's profile, and leaves checker's
// timeline while checker mutes u1.
func checkProfileAndMute(do func(method, path, body string) (int, map[string]any, error), id string) error {
	has := func(path string) (bool, error) {
		code, page, err := do("GET", path, "")
		if err != nil || code != 200 {
			return false, fmt.Errorf("%s: %d %v", path, code, err)
		}
		posts, _ := page["posts"].([]any)
		for _, p := range posts {
			if m, _ := p.(map[string]any); fmt.Sprint(m["id"]) == id {
				return true, nil
			}
		}
		return false, nil
	}
	for _, step := range []struct {
		action, path string
		want         bool
	}{
		{"", "/users/u1/posts", true},
		{"/users/checker/mute/u1", "/users/checker/timeline", false},
		{"/users/checker/unmute/u1", "/users/checker/timeline", true},
	} {
		if step.action != "" {
			if code, _, err := do("POST", step.action, ""); err != nil || code != 200 {
				return fmt.Errorf("%s: %d %v", step.action, code, err)
			}
		}
		ok, err := has(step.path)
		if err != nil {
			return err
		}
		if ok != step.want {
			return fmt.Errorf("after %q, %s shows post %s: %v, want %v", step.action, step.path, id, ok, step.want)
		}
	}
	fmt.Printf("post %s is on the author's profile; muting hid it from the timeline, unmuting showed it again\n", id)
	return nil
}

// checkNotifications: two users like u1's post (one twice); u1's
// notifications show one group of 2 actors, unseen, and marking it seen
// returns 0 unseen, 1 unread.
func checkNotifications(ctx context.Context, do func(method, path, body string) (int, map[string]any, error), id string) error {
	for _, u := range []string{"checker", "u2", "checker"} {
		if code, _, err := do("POST", "/users/"+u+"/likes/"+id, ""); err != nil || code != 200 {
			return fmt.Errorf("like by %s: %d %v", u, code, err)
		}
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		code, page, err := do("GET", "/users/u1/notifications", "")
		if err != nil || code != 200 {
			return fmt.Errorf("notifications: %d %v", code, err)
		}
		groups, _ := page["groups"].([]any)
		counts, _ := page["counts"].(map[string]any)
		if len(groups) == 1 {
			g, _ := groups[0].(map[string]any)
			if n := fmt.Sprint(g["actor_count"]); n == "2" {
				if u := fmt.Sprint(counts["unseen"]); u != "1" {
					return fmt.Errorf("unseen %s with one new group, want 1", u)
				}
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("u1's notifications: %v, want one group of 2 actors", groups)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	code, counts, err := do("POST", "/users/u1/notifications/seen", "")
	if err != nil || code != 200 || fmt.Sprint(counts["unseen"]) != "0" || fmt.Sprint(counts["unread"]) != "1" {
		return fmt.Errorf("mark seen: %d %v %v, want unseen 0, unread 1", code, counts, err)
	}
	fmt.Println("two likes (one repeated) of the post made one notification group of 2 actors; marking it seen left 0 unseen, 1 unread")
	return nil
}
