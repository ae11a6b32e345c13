package signin_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/casebook-dev/casebook/internal/testenv"
	"github.com/casebook-dev/casebook/signin"
)

// A Result serialises in snake_case with its dates as "2006-01-02"
// strings, and reads back the same; a Date accepts no other spelling.
func TestResultWireForm(t *testing.T) {
	today := signin.DateOf(testenv.Now(), testenv.Now().Location())
	r := signin.Result{Date: today, Streak: 3, Points: 15, Frozen: []signin.Date{today.AddDays(-2)}}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"date":"` + today.String() + `","streak":3,"points":15,"frozen":["` + today.AddDays(-2).String() + `"]}`
	if string(b) != want {
		t.Fatalf("wire form %s, want %s", b, want)
	}
	var back signin.Result
	if err := json.Unmarshal(b, &back); err != nil || back.Date != r.Date || len(back.Frozen) != 1 || back.Frozen[0] != r.Frozen[0] || back.Streak != 3 {
		t.Fatalf("read back %+v, %v", back, err)
	}
	if b, _ := json.Marshal(signin.Result{Date: today, AlreadySigned: true}); !strings.Contains(string(b), `"already_signed":true`) {
		t.Fatalf("a repeat: %s", b)
	}
	for _, bad := range []string{`"2026-1-02"`, `"20261202"`, `" ` + today.String() + `"`, `"` + today.String() + `T00:00:00Z"`, `{"Year":2026}`, `"2026-02-30"`} {
		var d signin.Date
		if err := json.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("date %s read as %v", bad, d)
		}
	}
	var zero signin.Date
	if b, _ := json.Marshal(zero); string(b) != `""` {
		t.Errorf("the zero date: %s", b)
	}
}
