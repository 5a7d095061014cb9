package main

import (
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// registerConfig adds --config to fs: a YAML file whose keys are the
// command's flag names (without dashes) and whose values are what the flag
// would be given; a list gives a repeatable flag several times. Flags on
// the command line win over the file.
func registerConfig(fs *flag.FlagSet) *string {
	return fs.String("config", "", "YAML `FILE` whose keys mirror this command's flags (e.g. kafka-brokers: host:9092); flags given on the command line win")
}

// parseFlagsAndConfig parses args, then fills the flags the command line
// left unset from the --config file.
func parseFlagsAndConfig(fs *flag.FlagSet, args []string, config *string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *config == "" {
		return nil
	}
	return applyConfig(fs, *config)
}

// applyConfig sets fs's flags from the YAML file path, except those set
// on the command line. Errors name the file, the line and the key.
func applyConfig(fs *flag.FlagSet, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("%w: --config: %v", errUsage, err)
	}
	f, err := parser.ParseBytes(b, 0)
	if err != nil {
		return fmt.Errorf("%w: --config %s: %v", errUsage, path, err)
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, doc := range f.Docs {
		if doc.Body == nil {
			continue
		}
		m, ok := doc.Body.(*ast.MappingNode)
		if !ok {
			return fmt.Errorf("%w: --config %s: line %d: want a mapping of flag names to values", errUsage, path, doc.Body.GetToken().Position.Line)
		}
		for _, kv := range m.Values {
			key := kv.Key.String()
			line := kv.Key.GetToken().Position.Line
			where := fmt.Sprintf("--config %s: line %d: %s", path, line, key)
			fl := fs.Lookup(key)
			switch {
			case fl == nil || key == "config":
				return fmt.Errorf("%w: %s: %s has no such flag", errUsage, where, fs.Name())
			case given[key]:
				continue // the command line wins
			}
			if ns, ok := fl.Value.(interface{ setNode(ast.Node) error }); ok {
				if err := ns.setNode(kv.Value); err != nil {
					return fmt.Errorf("%w: %s: %v", errUsage, where, err)
				}
				continue
			}
			vals, err := scalars(kv.Value)
			if err != nil {
				return fmt.Errorf("%w: %s: %v", errUsage, where, err)
			}
			if len(vals) > 1 && !isRepeatable(fl) {
				return fmt.Errorf("%w: %s: a list, but the flag takes one value", errUsage, where)
			}
			for _, v := range vals {
				if err := fs.Set(key, v); err != nil {
					return fmt.Errorf("%w: %s: %v", errUsage, where, err)
				}
			}
		}
	}
	return nil
}

// scalars returns a value node's text: one for a scalar, each item's for
// a list.
func scalars(n ast.Node) ([]string, error) {
	switch v := n.(type) {
	case *ast.SequenceNode:
		var out []string
		for _, item := range v.Values {
			s, err := scalars(item)
			if err != nil {
				return nil, err
			}
			if len(s) != 1 {
				return nil, fmt.Errorf("a list inside a list")
			}
			out = append(out, s[0])
		}
		return out, nil
	case *ast.StringNode:
		return []string{v.Value}, nil
	case *ast.MappingNode, *ast.MappingValueNode:
		return nil, fmt.Errorf("a mapping, want a value or a list of values")
	case *ast.NullNode:
		return nil, fmt.Errorf("no value")
	}
	return []string{strings.TrimSpace(n.GetToken().Value)}, nil
}

// repeatable is a flag.Value that collects every value it is given.
type repeatable interface{ repeatable() }

func isRepeatable(f *flag.Flag) bool {
	_, ok := f.Value.(repeatable)
	return ok
}

// propertyFlag collects --property KEY=VALUE pairs.
type propertyFlag map[string]string

func (p propertyFlag) repeatable() {}

func (p propertyFlag) String() string {
	var b []string
	for k, v := range p {
		b = append(b, k+"="+v)
	}
	return strings.Join(b, ",")
}

func (p propertyFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q: want KEY=VALUE", s)
	}
	p[k] = v
	return nil
}
