package main

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestKubernetesExampleFlags: every flag the Kubernetes example passes to
// `icesink run` and `icesink coordinator`, and every key of its config
// file, is one the command has (a renamed flag fails here, not in a
// cluster).
func TestKubernetesExampleFlags(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/icesink.yaml")
	if err != nil {
		t.Fatal(err)
	}
	help := map[string]string{}
	for _, cmd := range []string{"run", "coordinator"} {
		_, stderr, _ := icesink(t, cmd, "-h")
		help[cmd] = stderr
	}
	flagRE := regexp.MustCompile(`^\s*- --([a-z0-9-]+)`)
	keyRE := regexp.MustCompile(`^    ([a-z0-9-]+): `)
	cmd, checked, inConfig := "", 0, false
	for _, line := range strings.Split(string(b), "\n") {
		switch strings.TrimSpace(line) {
		case "- run":
			cmd = "run"
		case "- coordinator":
			cmd = "coordinator"
		case "common.yaml: |":
			inConfig = true
			continue
		case "---":
			inConfig = false
		}
		if m := keyRE.FindStringSubmatch(line); m != nil && inConfig { // common.yaml, both commands
			for c, h := range help {
				if !hasFlag(h, m[1]) {
					t.Errorf("config key %q: icesink %s has no such flag", m[1], c)
				}
			}
			checked++
		}
		if m := flagRE.FindStringSubmatch(line); m != nil && cmd != "" {
			if h := help[cmd]; !hasFlag(h, m[1]) {
				t.Errorf("icesink %s has no flag --%s", cmd, m[1])
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d flags and keys of the example, want its all (20+)", checked)
	}
}

// hasFlag reports whether a command's -h output lists flag name (spelled
// with one dash, or two where the command groups its flags by topic).
func hasFlag(help, name string) bool {
	for _, dash := range []string{"  -", "  --"} {
		if strings.Contains(help, dash+name+" ") || strings.Contains(help, dash+name+"\n") {
			return true
		}
	}
	return false
}

// TestGrafanaDashboard: every icesink metric the dashboard under deploy/
// queries is one the code exports (a metric renamed in the code, and not
// in the dashboard, fails here).
func TestGrafanaDashboard(t *testing.T) {
	b, err := os.ReadFile("../../deploy/grafana/icesink-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("the dashboard is not JSON: %v", err)
	}
	// The metric names the code spells (string literals of its sources).
	exported := map[string]bool{}
	lit := regexp.MustCompile(`"(icesink_[a-z_]+)"`)
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		for _, m := range lit.FindAllSubmatch(src, -1) {
			exported[string(m[1])] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	name := regexp.MustCompile(`icesink_[a-z_]+`)
	queried := 0
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, m := range name.FindAllString(tg.Expr, -1) {
				queried++
				base := m
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(m, suffix); ok && exported[s] {
						base = s
					}
				}
				if !exported[base] && !exported[m] {
					t.Errorf("panel %q queries %s, which no code exports", p.Title, m)
				}
			}
		}
	}
	if queried == 0 {
		t.Fatal("the dashboard queries no icesink metric")
	}
}

// TestTroubleshootingCoversLogs: every warning and error the code logs
// (slog's Warn and Error with a constant message) is explained in
// docs/troubleshooting.md: a new one fails here until it is.
func TestTroubleshootingCoversLogs(t *testing.T) {
	page, err := os.ReadFile("../../docs/troubleshooting.md")
	if err != nil {
		t.Fatal(err)
	}
	logRE := regexp.MustCompile(`\.(?:Warn|Error)\("([^"]+)"`)
	found := 0
	err = filepath.WalkDir("../..", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "../.." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range logRE.FindAllStringSubmatch(string(b), -1) {
			found++
			if !strings.Contains(string(page), m[1]) {
				t.Errorf("%s logs %q, which docs/troubleshooting.md does not explain", path, m[1])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found < 10 {
		t.Fatalf("found %d logged warnings and errors, want the code's all (10+)", found)
	}
}
