package statestore_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/icesink/icesink/coordinator/statestore"
)

func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "statestore-example-")
	defer os.RemoveAll(dir)

	st, err := statestore.Open(ctx, statestore.Options{Dir: dir, InFileEnabled: true})
	if err != nil {
		panic(err)
	}
	// Small state goes inline in _metadata; large state to its own file.
	_ = st.Save(ctx, 1, []byte("epoch 1: two pending payloads"))
	_ = st.Save(ctx, 2, []byte(strings.Repeat("p", 64<<10)))
	for _, c := range st.Checkpoints() {
		fmt.Println(c.ID, c.Format, c.Size, c.File != nil)
	}
	st.Close()

	// After a restart: restore off the caller's goroutine.
	st, _ = statestore.Open(ctx, statestore.Options{Dir: dir, InFileEnabled: true})
	defer st.Close()
	rs := st.NewRestorer()
	seq, _ := rs.RestoreLatest(ctx)
	res := <-rs.Results()
	fmt.Println(res.Seq == seq, res.ID, len(res.State), res.Err)
	// Output:
	// 1 v1-inline 29 false
	// 2 v2-file-handle 65536 true
	// true 2 65536 <nil>
}
