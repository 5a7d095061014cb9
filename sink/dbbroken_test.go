package sink

import (
	"errors"
	"testing"
)

// TestBrokenEpochHeardByEveryWriter: a table's commit that failed for good
// is the error of every one of its writers' sessions, not only the first
// to ask (issue 46 item 11: the others took the failed epoch as committed:
// key index, checkpoint and group offsets moved on).
func TestBrokenEpochHeardByEveryWriter(t *testing.T) {
	d := &Database{tables: map[string]*dbTable{}}
	tb := &dbTable{sessions: 3}
	d.tables["db.b"] = tb
	bad := errors.New("refused")
	d.markBroken(tb, 7, bad)
	for i := range 3 {
		if err := d.brokenAt("db.b", 7); !errors.Is(err, bad) {
			t.Fatalf("writer %d heard %v, want the failure", i, err)
		}
	}
	if err := d.brokenAt("db.b", 7); err != nil {
		t.Fatalf("after every writer heard: %v", err)
	}
	if err := d.brokenAt("db.b", 8); err != nil {
		t.Fatalf("another epoch: %v", err)
	}
}
