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
