package main

import (
	"bytes"
	"context"
	"flag"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/icesink/icesink/warehouse"
)

// weedS3 starts SeaweedFS (`weed mini`: a real S3-compatible server with an
// Iceberg REST catalog, Apache-2.0, built from the Go module proxy by
// .ci/run) in a temporary folder, with credentials for user icesink, and
// returns the S3 endpoint and the REST catalog's URL. The binary is
// $ICESINK_WEED, or weed on PATH; without one the test is skipped.
func weedS3(t *testing.T) (s3, rest string) {
	t.Helper()
	bin := os.Getenv("ICESINK_WEED")
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("weed"); err != nil {
			t.Skip("no SeaweedFS binary: set ICESINK_WEED (.ci/run builds one)")
		}
	}
	if c, err := net.DialTimeout("tcp", "127.0.0.1:8333", 100*time.Millisecond); err == nil {
		c.Close()
		t.Skip("port 8333 is taken; weed mini needs its default ports")
	}
	dir := t.TempDir()
	cmd := exec.Command(bin, "mini", "-dir="+dir, "-ip=127.0.0.1", "-ip.bind=127.0.0.1", "-webdav=false", "-admin.ui=false")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID=icesink", "AWS_SECRET_ACCESS_KEY=icesink-secret", "S3_BUCKET=icesink")
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(90 * time.Second)
	for !strings.Contains(out.String(), "Iceberg Catalog:") {
		if time.Now().After(deadline) {
			t.Fatalf("weed mini did not start:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Setenv("AWS_ACCESS_KEY_ID", "icesink")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "icesink-secret")
	// A table bucket for the REST catalog (each is a catalog of its own).
	sh := exec.Command(bin, "shell", "-master=127.0.0.1:9333")
	sh.Stdin = strings.NewReader("s3tables.bucket -create -name tables -account icesink\n")
	if b, err := sh.CombinedOutput(); err != nil || !strings.Contains(string(b), "arn:aws:s3tables") {
		t.Fatalf("creating the table bucket: %v\n%s", err, b)
	}
	return "http://127.0.0.1:8333", "http://127.0.0.1:8181"
}

// syncBuffer is a bytes.Buffer safe for a child's output and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestObjectStorage writes to an s3:// warehouse on a real S3 server:
// runs killed with SIGKILL at random moments (mid-upload) and rerun end
// with the table equal to the stream and each epoch committed once; and
// the sample through SeaweedFS's Iceberg REST catalog reads back exactly.
func TestObjectStorage(t *testing.T) {
	if testing.Short() {
		t.Skip("object storage test")
	}
	s3, rest := weedS3(t)
	local := t.TempDir()
	rng := rand.New(rand.NewPCG(23, 23))
	in, lines := stream(t, rng, 20000, 2000)
	common := []string{"--warehouse", "s3://icesink/wh", "--catalog-uri", "sqlite:" + filepath.Join(local, "catalog.db"), "--s3-endpoint", s3, "--table", "db.t"}
	args := append([]string{"run", "--schema", writeSchema(t), "--input", in, "--checkpoint-rows", "1000", "--state-dir", filepath.Join(local, "state"), "--quiet"}, common...)
	kills := killAndRerun(t, rng, args, 4, 300*time.Millisecond, 1500*time.Millisecond)
	t.Logf("killed %d runs", kills)
	got, stderr, code := icesink(t, append([]string{"scan"}, common...)...)
	if code != 0 {
		t.Fatalf("scan: exit %d: %s", code, stderr)
	}
	if want := expectedScan(t, lines, len(lines)); got != want {
		t.Errorf("the s3:// table after kills and reruns differs from the stream")
	}
	// The reruns' start-up sweep removed the killed runs' uploads: no data
	// or delete file is left unreferenced in the bucket. An upload whose
	// body had reached the server when its run was killed may land after
	// the next run's listing (the reruns start at once): one more run,
	// with nothing new to write, sweeps what landed late.
	if _, stderr, code := icesink(t, args...); code != 0 {
		t.Fatalf("a run after the reruns: exit %d: %s", code, stderr)
	}
	if orphans := sinkOrphans(t, common); len(orphans) > 0 {
		t.Errorf("%d files of killed runs left in the bucket: %s", len(orphans), strings.Join(orphans, "\n"))
	}
	snaps, _, _ := icesink(t, append([]string{"snapshots"}, common...)...)
	seen := map[string]bool{}
	for _, l := range strings.Split(snaps, "\n")[1:] {
		if f := strings.Fields(l); len(f) >= 4 && f[2] != "replace" {
			if seen[f[3]] {
				t.Errorf("epoch %s committed twice", f[3])
			}
			seen[f[3]] = true
		}
	}

	// The REST catalog: SigV4-signed requests, the table bucket as the
	// warehouse.
	restArgs := []string{"--warehouse", "s3://tables", "--catalog-uri", rest, "--s3-endpoint", s3, "--table", "demo.orders",
		"--catalog-property", "rest.sigv4-enabled=true", "--catalog-property", "rest.signing-region=us-east-1", "--catalog-property", "rest.signing-name=s3"}
	if _, stderr, code := icesink(t, append([]string{"run", "--schema", "../../testdata/orders.schema.json", "--input", "../../testdata/orders.changelog.jsonl",
		"--state-dir", filepath.Join(local, "state-rest")}, restArgs...)...); code != 0 {
		t.Fatalf("run on the REST catalog: exit %d: %s", code, stderr)
	}
	want, _ := os.ReadFile("../../testdata/orders.expected.jsonl")
	if got, stderr, _ := icesink(t, append([]string{"scan"}, restArgs...)...); got != string(want) {
		t.Errorf("scan through the REST catalog =\n%s\nwant\n%s\n%s", got, want, stderr)
	}
	// A rerun finds its commits through the REST catalog and adds none.
	if _, stderr, code := icesink(t, append([]string{"run", "--input", "../../testdata/orders.changelog.jsonl", "--state-dir", filepath.Join(local, "state-rest")}, restArgs...)...); code != 0 || !strings.Contains(stderr, "resumed after input line 14") {
		t.Errorf("rerun on the REST catalog: exit %d: %s", code, stderr)
	}
}

// sinkOrphans lists the files under the table's data location (args give
// --warehouse, --catalog-uri, --s3-endpoint and --table) that no snapshot
// references, through iceberg-go's orphan planning on the table's IO.
func sinkOrphans(t *testing.T, args []string) []string {
	t.Helper()
	var tf tableFlags
	fs := flag.NewFlagSet("orphans", flag.ContinueOnError)
	tf.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := warehouse.Open(ctx, tf.warehouse, tf.options())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	ident, err := warehouse.ParseIdent(tf.table)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := w.Catalog.LoadTable(ctx, ident)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := tbl.DeleteOrphanFiles(ctx, table.WithLocation(tbl.Location()+"/data"), table.WithFilesOlderThan(0), table.WithDryRun(true))
	if err != nil {
		t.Fatalf("listing the bucket: %v", err)
	}
	return plan.OrphanFileLocations
}
