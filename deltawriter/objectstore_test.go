package deltawriter_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/deltawriter"
	"github.com/icesink/icesink/warehouse"
)

// TestFilesCompleteOnObjectStorage writes a window into a table on
// iceberg-go's in-memory object store, where a file exists only once its
// writer is closed (as an upload completes only on close), and reads the
// table back. Before, data and delete files were never closed after a
// successful write: committed files did not exist and the scan failed.
func TestFilesCompleteOnObjectStorage(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	ident := table.Identifier{"db", "mem"}
	if err := wh.Catalog.CreateNamespace(ctx, table.Identifier{"db"}, nil); err != nil {
		t.Fatal(err)
	}
	loc := fmt.Sprintf("mem://%s/db/mem", t.Name())
	_, err = wh.Catalog.CreateTable(ctx, ident, schema, catalog.WithLocation(loc),
		catalog.WithProperties(iceberg.Properties{"format-version": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := commit.NewCommitter(ctx, wh.Catalog, ident, "mem")
	if err != nil {
		t.Fatal(err)
	}
	for epoch := uint64(1); epoch <= 2; epoch++ {
		w, err := deltawriter.New(ctx, cm.Table(), deltawriter.Options{SinkID: "mem", SpillDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			// Epoch 2 updates the even keys (equality deletes) and deletes
			// one it wrote itself (a position delete).
			if epoch == 2 && i%2 == 1 {
				continue
			}
			if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(i), fmt.Sprint("v", epoch, "-", i)}}); err != nil {
				t.Fatal(err)
			}
		}
		if epoch == 2 {
			if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Delete, Row: []any{int64(0), nil}}); err != nil {
				t.Fatal(err)
			}
		}
		p, err := w.PrepareCommit(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cm.Commit(ctx, epoch, []commit.Payload{p}, nil); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	n := 0
	for row, err := range warehouse.Rows(ctx, cm.Table()) {
		if err != nil {
			t.Fatalf("reading the table back: %v", err)
		}
		id, v := row[0].(int64), row[1].(string)
		want := fmt.Sprint("v1-", id)
		if id%2 == 0 {
			want = fmt.Sprint("v2-", id)
		}
		if id == 0 || v != want {
			t.Fatalf("row %v, want id %d = %q (and no id 0)", row, id, want)
		}
		n++
	}
	if n != 99 {
		t.Fatalf("%d rows read back, want 99", n)
	}
}

// A table whose partitioning evolved is refused with the reason, since
// equality deletes apply within one spec's partitions.
func TestRefusesEvolvedSpec(t *testing.T) {
	ctx := context.Background()
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true})
	tbl, _, err := wh.LoadOrCreate(ctx, table.Identifier{"db", "evolved"}, warehouse.TableSpec{Schema: schema})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := deltawriter.New(ctx, tbl, deltawriter.Options{SpillDir: t.TempDir()}); err != nil {
		t.Fatalf("one spec: %v", err)
	}
	txn := tbl.NewTransaction()
	if err := txn.UpdateSpec(true).AddField("id", iceberg.BucketTransform{NumBuckets: 4}, "id_bucket").Commit(); err != nil {
		t.Fatal(err)
	}
	if tbl, err = txn.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = deltawriter.New(ctx, tbl, deltawriter.Options{SpillDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "2 partition specs") {
		t.Fatalf("evolved spec: got %v, want a refusal naming the 2 partition specs", err)
	}
}

// stallFS is a table file system whose file writes block while stalled,
// as an upload to a slow object store would.
type stallFS struct {
	*iceio.MemFS
	stalled atomic.Bool
	release chan struct{}
}

func (s *stallFS) Create(name string) (iceio.FileWriter, error) {
	w, err := s.MemFS.Create(name)
	if err != nil {
		return nil, err
	}
	return stallWriter{w, s}, nil
}

type stallWriter struct {
	iceio.FileWriter
	fs *stallFS
}

func (w stallWriter) Write(p []byte) (int, error) {
	if w.fs.stalled.Load() {
		<-w.fs.release
	}
	return w.FileWriter.Write(p)
}

// Write and PrepareCommit give up when their context ends, even while the
// hand-off to the encoder waits for a stalled file write; before, the
// hand-off blocked until the write finished, whatever the context. After
// the writes resume, Abort leaves the writer usable.
func TestWriteStopsOnCancelWhileEncoderStalls(t *testing.T) {
	ctx := context.Background()
	scheme := fmt.Sprintf("stall%d", time.Now().UnixNano())
	sfs := &stallFS{MemFS: iceio.NewMemFS(), release: make(chan struct{})}
	iceio.Register(scheme, func(context.Context, *url.URL, map[string]string) (iceio.IO, error) { return sfs, nil })
	t.Cleanup(func() { iceio.Unregister(scheme) })
	wh, err := warehouse.Open(ctx, t.TempDir(), warehouse.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer wh.Close()
	schema := iceberg.NewSchemaWithIdentifiers(0, []int{1},
		iceberg.NestedField{ID: 1, Name: "id", Type: iceberg.PrimitiveTypes.Int64, Required: true},
		iceberg.NestedField{ID: 2, Name: "v", Type: iceberg.PrimitiveTypes.String})
	if err := wh.Catalog.CreateNamespace(ctx, table.Identifier{"db"}, nil); err != nil {
		t.Fatal(err)
	}
	tbl, err := wh.Catalog.CreateTable(ctx, table.Identifier{"db", "stall"}, schema,
		catalog.WithLocation(scheme+"://b/db/stall"), catalog.WithProperties(iceberg.Properties{"format-version": "2"}))
	if err != nil {
		t.Fatal(err)
	}
	w, err := deltawriter.New(ctx, tbl, deltawriter.Options{SinkID: "s", SpillDir: t.TempDir(), BatchRows: 16, RowGroupBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	// Two batches: the files are open (their headers written); from now
	// on the encoder's row-group writes stall.
	for i := range 32 {
		if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(-1 - i), "v"}}); err != nil {
			t.Fatal(err)
		}
	}
	sfs.stalled.Store(true)
	cctx, cancel := context.WithCancel(ctx)
	time.AfterFunc(100*time.Millisecond, cancel)
	errc := make(chan error, 1)
	go func() {
		for i := range 1 << 20 {
			if err := w.Write(cctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(i), "v"}}); err != nil {
				errc <- err
				return
			}
		}
		_, err := w.PrepareCommit(cctx)
		errc <- err
	}()
	select {
	case err := <-errc:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want an error wrapping context.Canceled", err)
		}
	case <-time.After(20 * time.Second):
		t.Error("Write still blocked 20 s after its context was cancelled")
	}
	sfs.stalled.Store(false)
	close(sfs.release)
	if err := w.Abort(ctx); err != nil {
		t.Fatalf("abort: %v", err)
	}
	if err := w.Write(ctx, deltawriter.Change{Op: deltawriter.Insert, Row: []any{int64(1), "v"}}); err != nil {
		t.Fatalf("write after abort: %v", err)
	}
	p, err := w.PrepareCommit(ctx)
	if err != nil || len(p.Files) != 1 { // a data file (the key index finds no old row)
		t.Fatalf("prepare after abort: %d files, %v", len(p.Files), err)
	}
	if err := w.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
