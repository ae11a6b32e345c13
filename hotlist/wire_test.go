package hotlist_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/casebook-dev/casebook/hotlist"
	"github.com/casebook-dev/casebook/internal/testenv"
)

// A Snapshot serialises in snake_case; a snapshot entry's flags appear
// only when set.
func TestSnapshotWireForm(t *testing.T) {
	at := time.UnixMilli(testenv.Now().UnixMilli()).UTC()
	s := hotlist.Snapshot{At: at, Entries: []hotlist.Entry{
		{Item: "a", Heat: 2.5, Rank: 1, Change: 2},
		{Item: "b", Heat: 1, Rank: 2, New: true, Pinned: true},
	}}
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	stamp, _ := at.MarshalJSON()
	want := `{"at":` + string(stamp) + `,"entries":[{"item":"a","heat":2.5,"rank":1,"change":2},{"item":"b","heat":1,"rank":2,"new":true,"pinned":true}]}`
	if string(b) != want {
		t.Fatalf("wire form %s, want %s", b, want)
	}
	var back hotlist.Snapshot
	if err := json.Unmarshal(b, &back); err != nil || !back.At.Equal(at) || len(back.Entries) != 2 || back.Entries[1] != s.Entries[1] {
		t.Fatalf("read back %+v, %v", back, err)
	}
}
