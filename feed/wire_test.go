package feed_test

import (
	"encoding/json"
	"testing"

	"github.com/casebook-dev/casebook/feed"
)

// A Page serialises in snake_case; the last page has no "next".
func TestPageWireForm(t *testing.T) {
	p := feed.Page{Posts: []feed.Post{{ID: 9, Author: "a", Body: "b", CreatedAt: 1, Score: 1000}}, Next: "c"}
	b, err := json.Marshal(p)
	want := `{"posts":[{"id":9,"author":"a","body":"b","at":1,"score":1000}],"next":"c"}`
	if err != nil || string(b) != want {
		t.Fatalf("wire form %s, %v; want %s", b, err, want)
	}
	if b, _ := json.Marshal(feed.Page{Posts: []feed.Post{}}); string(b) != `{"posts":[]}` {
		t.Fatalf("the last page: %s", b)
	}
}
