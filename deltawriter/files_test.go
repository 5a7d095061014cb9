package deltawriter_test

import (
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
)

// countFiles counts the Parquet files under a file:// warehouse location.
func countFiles(t *testing.T, loc string) int {
	t.Helper()
	u, err := url.Parse(loc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	err = filepath.WalkDir(u.Path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(p, ".parquet") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
