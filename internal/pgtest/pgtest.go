// Package pgtest starts a throwaway PostgreSQL server for tests that need
// a real shared catalog. The server runs from the machine's PostgreSQL
// binaries (Debian's postgresql package) as the postgres user when the
// test runs as root, in a temporary folder, on a free loopback port.
package pgtest

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Start returns the URL of a fresh PostgreSQL database, or skips the test
// when PostgreSQL is not installed (it fails instead when
// ICESINK_REQUIRE_POSTGRES=1, as CI sets). The server stops with the test.
// Its WAL is logical (wal_level=logical, replication slots and WAL
// senders), so that a test can read its changes; settings are more
// NAME=VALUE server settings.
func Start(t testing.TB, settings ...string) string {
	t.Helper()
	return StartServer(t, settings...).URL
}

// Server is a running test server.
type Server struct {
	// URL reaches its postgres database as the postgres superuser.
	URL  string
	t    testing.TB
	data string
	opts string
	log  string
	as   func(name string, args ...string) *exec.Cmd
}

// Restart stops the server at once (as a crash would: immediate mode)
// and starts it again on the same port; it waits for the server to
// listen.
func (s *Server) Restart() {
	s.t.Helper()
	if out, err := s.as("pg_ctl", "-D", s.data, "-m", "immediate", "stop").CombinedOutput(); err != nil {
		s.t.Fatalf("pg_ctl stop: %v\n%s", err, out)
	}
	if out, err := s.as("pg_ctl", "-D", s.data, "-o", s.opts, "-l", s.log, "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(s.log)
		s.t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
}

// StartServer is Start, returning the server.
func StartServer(t testing.TB, settings ...string) *Server {
	t.Helper()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		if os.Getenv("ICESINK_REQUIRE_POSTGRES") == "1" {
			t.Fatal("PostgreSQL is required (ICESINK_REQUIRE_POSTGRES=1) but /usr/lib/postgresql/*/bin/initdb is missing")
		}
		t.Skip("PostgreSQL is not installed (apt-get install postgresql)")
	}
	bin := filepath.Dir(bins[len(bins)-1])
	base := ""
	if os.Geteuid() == 0 {
		// The postgres user must reach the folder: not through a private
		// TMPDIR of root's.
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "icesink-pg")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	asUser := func(name string, args ...string) *exec.Cmd {
		if os.Geteuid() == 0 {
			return exec.Command("runuser", append([]string{"-u", "postgres", "--", filepath.Join(bin, name)}, args...)...)
		}
		return exec.Command(filepath.Join(bin, name), args...)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Fatalf("running as root needs the postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	if out, err := asUser("initdb", "-D", data, "-A", "trust", "-U", "postgres").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	port := freePort(t)
	opts := fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off -c wal_level=logical -c max_replication_slots=16 -c max_wal_senders=16", port, dir)
	for _, s := range settings {
		opts += " -c " + s
	}
	if out, err := asUser("pg_ctl", "-D", data, "-o", opts, "-l", filepath.Join(dir, "log"), "-w", "start").CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "log"))
		t.Fatalf("pg_ctl start: %v\n%s\n%s", err, out, log)
	}
	t.Cleanup(func() { _ = asUser("pg_ctl", "-D", data, "-m", "immediate", "stop").Run() })
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			c.Close()
			return &Server{URL: url, t: t, data: data, opts: opts, log: filepath.Join(dir, "log"), as: asUser}
		}
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL did not listen on %d: %v", port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
