package main

import "testing"

// TestDefaultStateDirPerTable: two sinks with the default sink id on two
// tables of one warehouse get two state folders (before, the folder
// depended on the sink id only, and the runs broke each other).
func TestDefaultStateDirPerTable(t *testing.T) {
	a, err := (&tableFlags{warehouse: "wh", table: "db.a"}).localStateDir("icesink")
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&tableFlags{warehouse: "wh", table: "db.b"}).localStateDir("icesink")
	if err != nil {
		t.Fatal(err)
	}
	if a == b {
		t.Fatalf("tables db.a and db.b share the state folder %s", a)
	}
}
