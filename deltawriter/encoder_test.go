package deltawriter

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// fullDiskIO is the local file system with files that fail their writes
// once they hold limit bytes, as on a full disk.
type fullDiskIO struct {
	iceio.LocalFS
	limit int64
}

func (f fullDiskIO) Create(name string) (iceio.FileWriter, error) {
	w, err := f.LocalFS.Create(name)
	if err != nil {
		return nil, err
	}
	return &fullDiskFile{FileWriter: w, left: f.limit}, nil
}

type fullDiskFile struct {
	iceio.FileWriter
	left int64
}

func (w *fullDiskFile) Write(p []byte) (int, error) {
	if int64(len(p)) > w.left {
		return 0, &os.PathError{Op: "write", Path: "f", Err: syscall.ENOSPC}
	}
	w.left -= int64(len(p))
	return w.FileWriter.Write(p)
}

// TestEncoderWriteFailure: a write that fails on the encoder's goroutine
// reaches the writer at a later hand-off or at close, naming the file and
// wrapping the cause; the file can be aborted (and is removed), and the
// encoder goes on serving the writer's other files.
func TestEncoderWriteFailure(t *testing.T) {
	dir := t.TempDir()
	enc := newEncoder(0)
	defer enc.close()
	sc := table.PositionalDeleteArrowSchema
	props := WriterProperties(nil, sc)
	open := func(fs iceio.WriteFileIO, name string) *parquetFile {
		t.Helper()
		// 64 KiB row groups: pages reach the file while rows are still coming.
		f, err := createParquetFile(fs, enc, filepath.Join(dir, name), sc, props, 1024, 64<<10)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	fill := func(f *parquetFile, rows int) (int64, error) {
		for i := 0; i < rows; i++ {
			if _, err := f.appendRow([]any{strings.Repeat("p", i%97), int64(i)}, nil); err != nil {
				return 0, err
			}
		}
		md, _, err := f.close()
		if err != nil {
			return 0, err
		}
		return md.NumRows, nil
	}

	bad := open(fullDiskIO{limit: 4 << 10}, "bad.parquet")
	good := open(iceio.LocalFS{}, "good.parquet")
	_, err := fill(bad, 200_000)
	if !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), "bad.parquet") {
		t.Fatalf("error %v: want ENOSPC naming bad.parquet", err)
	}
	if _, err := os.Stat(bad.path); err != nil {
		t.Fatalf("the failed file is gone before abort: %v", err)
	}
	bad.abort(iceio.LocalFS{})
	if _, err := os.Stat(bad.path); !os.IsNotExist(err) {
		t.Fatalf("aborted file still there: %v", err)
	}
	// A file that fails at close is removed by close.
	bad2 := open(fullDiskIO{limit: 64}, "bad2.parquet") // room for the magic, not the footer
	if _, err := bad2.appendRow([]any{"p", int64(1)}, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bad2.close(); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("close of a file over the disk's room: %v", err)
	}
	if _, err := os.Stat(bad2.path); !os.IsNotExist(err) {
		t.Fatalf("file that failed at close still there: %v", err)
	}
	// The encoder still serves the writer's other files.
	if n, err := fill(good, 50_000); err != nil || n != 50_000 {
		t.Fatalf("good file: %d rows, %v", n, err)
	}
}
