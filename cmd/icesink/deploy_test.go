package main

import (
	"os"
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
				if !strings.Contains(h, "  -"+m[1]+" ") && !strings.Contains(h, "  -"+m[1]+"\n") {
					t.Errorf("config key %q: icesink %s has no such flag", m[1], c)
				}
			}
			checked++
		}
		if m := flagRE.FindStringSubmatch(line); m != nil && cmd != "" {
			if h := help[cmd]; !strings.Contains(h, "  -"+m[1]+" ") && !strings.Contains(h, "  -"+m[1]+"\n") {
				t.Errorf("icesink %s has no flag --%s", cmd, m[1])
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d flags and keys of the example, want its all (20+)", checked)
	}
}
