package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
)

var updateReference = flag.Bool("update-reference", false, "write docs/reference.md from the commands' flags")

// reference is docs/reference.md: every flag of every command, from the
// commands' own flag sets (their -h output).
func reference(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("# Command reference\n\nEvery flag of every `icesink` command, generated from the commands' own flag sets\n" +
		"(`go test ./cmd/icesink -run TestReference -update-reference` writes this page; the test fails when it\n" +
		"and the flags differ). Flags are spelled `--flag` here; one dash works too. Every flag can also be\n" +
		"given in the `--config` file under its name without dashes.\n")
	for _, cmd := range []string{"run", "coordinator", "scan", "snapshots", "maintain", "bench"} {
		var stderr bytes.Buffer
		if code := run(context.Background(), []string{cmd, "-h"}, nil, &stderr, &stderr); code != 0 {
			t.Fatalf("icesink %s -h: exit %d\n%s", cmd, code, stderr.String())
		}
		fmt.Fprintf(&b, "\n## icesink %s\n\n", cmd)
		var entry string
		flush := func() {
			if entry != "" {
				b.WriteString(entry + "\n")
			}
			entry = ""
		}
		for _, line := range strings.Split(stderr.String(), "\n") {
			switch {
			case line != "" && !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":"):
				// A topic of a command whose -h groups its flags.
				flush()
				fmt.Fprintf(&b, "\n### %s\n\n", strings.TrimSuffix(line, ":"))
			case strings.HasPrefix(line, "      ") && entry != "":
				entry += ": " + strings.TrimSpace(line)
			case strings.HasPrefix(line, "  -"):
				flush()
				head, usage, short := strings.Cut(strings.TrimLeft(line, " -"), "\t") // a one-letter flag: usage on its line
				name, arg, _ := strings.Cut(head, " ")
				entry = "- `--" + name
				if arg != "" {
					entry += " " + arg
				}
				entry += "`"
				if short {
					entry += ": " + usage
				}
			case strings.HasPrefix(line, "    \t") && entry != "":
				if !strings.Contains(entry, "`: ") {
					entry += ":"
				}
				entry += " " + strings.TrimPrefix(line, "    \t")
			}
		}
		flush()
	}
	return strings.ReplaceAll(b.String(), "\n\n\n", "\n\n")
}

// TestReference: docs/reference.md lists exactly the commands' flags, with
// their descriptions and defaults.
func TestReference(t *testing.T) {
	want := reference(t)
	const path = "../../docs/reference.md"
	if *updateReference {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(want, "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("docs/reference.md differs from the flags at line %d:\n page:  %s\n flags: %s\n(go test ./cmd/icesink -run TestReference -update-reference writes it)", i+1, g, w)
			}
		}
	}
}

// TestHelpTopics: every command's -h groups its flags under topics, each
// flag once, spelled with two dashes, its argument named (not the flag
// package's type names).
func TestHelpTopics(t *testing.T) {
	for _, cmd := range []string{"run", "coordinator", "scan", "snapshots", "maintain", "bench"} {
		var stderr bytes.Buffer
		if code := run(context.Background(), []string{cmd, "-h"}, nil, &stderr, &stderr); code != 0 {
			t.Fatalf("icesink %s -h: exit %d\n%s", cmd, code, stderr.String())
		}
		seen, topics := map[string]bool{}, 0
		for _, line := range strings.Split(stderr.String(), "\n") {
			switch {
			case line != "" && !strings.HasPrefix(line, " ") && strings.HasSuffix(line, ":"):
				topics++
			case strings.HasPrefix(line, "  -"):
				if topics == 0 || !strings.HasPrefix(line, "  --") {
					t.Errorf("icesink %s -h: %q is not a --flag under a topic", cmd, line)
				}
				name, arg, _ := strings.Cut(strings.TrimPrefix(line, "  --"), " ")
				if seen[name] {
					t.Errorf("icesink %s -h lists --%s twice", cmd, name)
				}
				seen[name] = true
				switch arg {
				case "int", "uint", "string", "duration", "float", "value":
					t.Errorf("icesink %s -h: --%s takes %q: name the argument in its usage (`ARG`)", cmd, name, arg)
				}
			}
		}
		if len(seen) < 5 || topics == 0 {
			t.Errorf("icesink %s -h: %d flags under %d topics:\n%s", cmd, len(seen), topics, stderr.String())
		}
	}
}
