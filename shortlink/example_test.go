package shortlink_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/casebook-dev/casebook/devstack"
	"github.com/casebook-dev/casebook/shortlink"
)

// Shorten a URL under a custom alias with a visit limit, and resolve it.
func Example() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example") // a service passes its own clients
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()

	svc, err := shortlink.NewService(sc.Redis, []*sqlx.DB{sc.SQL}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: sc.Namespace})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	link, err := svc.Shorten(ctx, "https://go.dev/doc/", shortlink.Options{Alias: "go-docs", MaxVisits: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(svc.ShortURL(link.Code))
	got, err := svc.Resolve(ctx, "go-docs")
	fmt.Println(got.URL, err)
	_, err = svc.Resolve(ctx, "go-docs")
	fmt.Println(errors.Is(err, shortlink.ErrMaxVisits))
	_, err = svc.Shorten(ctx, "https://sho.rt/go-docs", shortlink.Options{})
	fmt.Println(errors.Is(err, shortlink.ErrInvalidURL))
	// Output:
	// https://sho.rt/go-docs
	// https://go.dev/doc/ <nil>
	// true
	// true
}

// Edit a link's destination with compare-and-set, and read its history.
func ExampleService_Update() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example-update")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()
	svc, err := shortlink.NewService(sc.Redis, []*sqlx.DB{sc.SQL}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: sc.Namespace})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	link, err := svc.Shorten(ctx, "https://go.dev/doc/", shortlink.Options{Alias: "go-spec", Owner: "gopher"})
	if err != nil {
		fmt.Println(err)
		return
	}
	edited, err := svc.Update(ctx, "go-spec", shortlink.Update{URL: new("https://go.dev/ref/spec"), Actor: "gopher", IfVersion: link.Version})
	fmt.Println(edited.URL, edited.Version, err)
	_, err = svc.Update(ctx, "go-spec", shortlink.Update{URL: new("https://example.com/"), Actor: "mallory", IfVersion: link.Version})
	fmt.Println(errors.Is(err, shortlink.ErrConflict))
	got, _ := svc.Resolve(ctx, "go-spec")
	fmt.Println(got.URL)
	revs, _ := svc.History(ctx, "go-spec", shortlink.HistoryOptions{})
	fmt.Println(len(revs), revs[0].Actor, revs[0].Before.URL, revs[0].Changed)
	// Output:
	// https://go.dev/ref/spec 2 <nil>
	// true
	// https://go.dev/ref/spec
	// 1 gopher https://go.dev/doc/ [url]
}

// Tag an owner's links, page through them newest first, and filter by tag.
func ExampleService_List() {
	ctx := context.Background()
	sc, err := devstack.OpenScratch(ctx, "example-list")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sc.Close()
	svc, err := shortlink.NewService(sc.Redis, []*sqlx.DB{sc.SQL}, shortlink.Config{BaseURL: "https://sho.rt", Namespace: sc.Namespace})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer svc.Close()
	if err := svc.Migrate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	made, err := svc.ShortenMany(ctx, []shortlink.Request{
		{URL: "https://go.dev/doc/", Options: shortlink.Options{Alias: "go-a", Owner: "gopher", Tags: []string{"docs"}}},
		{URL: "https://go.dev/blog/", Options: shortlink.Options{Alias: "go-b", Owner: "gopher", Tags: []string{"blog"}}},
		{URL: "ftp://go.dev/", Options: shortlink.Options{Alias: "go-x", Owner: "gopher"}},
		{URL: "https://go.dev/ref/spec", Options: shortlink.Options{Alias: "go-c", Owner: "gopher", Tags: []string{" Docs", "Spec"}}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(made[2].Link == nil, errors.Is(made[2].Err, shortlink.ErrInvalidURL), made[3].Link.Tags)
	page, next, _ := svc.List(ctx, "gopher", shortlink.ListFilter{}, "", 2)
	fmt.Println(page[0].Code, page[1].Code)
	page, next, _ = svc.List(ctx, "gopher", shortlink.ListFilter{}, next, 2)
	fmt.Println(page[0].Code, len(page), next == "")
	page, _, _ = svc.List(ctx, "gopher", shortlink.ListFilter{Tag: "docs"}, "", 10)
	fmt.Println(page[0].Code, page[1].Code)
	// Output:
	// true true [docs spec]
	// go-c go-b
	// go-a 1 true
	// go-c go-a
}
