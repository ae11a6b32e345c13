package sqlutil_test

import (
	"testing"

	"github.com/casebook-dev/casebook/internal/sqlutil"
	"github.com/casebook-dev/casebook/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// On the real dialect: a duplicate key is recognised, other errors are not,
// and BinaryKey columns tell "abc" from "ABC".
func TestDuplicateAndBinaryKey(t *testing.T) {
	db := testenv.NewSQL(t)
	if _, err := db.Exec("CREATE TABLE k (code " + sqlutil.BinaryKey(db, 16) + " NOT NULL PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("INSERT INTO k (code) VALUES ('abc'), ('ABC')"); err != nil {
		t.Fatalf("case-different keys collide: %v", err)
	}
	_, err := db.Exec("INSERT INTO k (code) VALUES ('abc')")
	if !sqlutil.IsDuplicate(err) {
		t.Fatalf("duplicate not recognised: %v", err)
	}
	_, err = db.Exec("INSERT INTO nope (code) VALUES ('x')")
	if err == nil || sqlutil.IsDuplicate(err) {
		t.Fatalf("missing table taken for a duplicate: %v", err)
	}
}
