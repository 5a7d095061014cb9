package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// helpTopics groups a command's flags by topic for its -h output, in the
// order they are registered: each topic takes the flags its register
// function adds.
type helpTopics struct {
	fs     *flag.FlagSet
	topics []helpTopic
	seen   map[string]bool
	// current is the topic of the flags registered since the last flush.
	current string
}

type helpTopic struct {
	name  string
	flags []string
}

func newHelpTopics(fs *flag.FlagSet) *helpTopics {
	h := &helpTopics{fs: fs, seen: map[string]bool{}}
	fs.Usage = func() { h.print(fs.Output()) }
	return h
}

// add registers flags with register, under topic (a topic named twice
// gathers both registrations).
func (h *helpTopics) add(topic string, register func(*flag.FlagSet)) {
	h.section(topic)
	register(h.fs)
	h.flush()
}

// section starts topic: the flags registered from now until the next
// section (or add) go under it.
func (h *helpTopics) section(topic string) {
	h.flush()
	h.current = topic
}

// flush files the flags registered since the last flush under the
// current topic.
func (h *helpTopics) flush() {
	topic := h.current
	var names []string
	h.fs.VisitAll(func(f *flag.Flag) {
		if !h.seen[f.Name] {
			h.seen[f.Name] = true
			names = append(names, f.Name)
		}
	})
	if len(names) == 0 {
		return
	}
	for i := range h.topics {
		if h.topics[i].name == topic {
			h.topics[i].flags = append(h.topics[i].flags, names...)
			return
		}
	}
	h.topics = append(h.topics, helpTopic{topic, names})
}

// print writes the flags topic by topic, spelled with two dashes.
func (h *helpTopics) print(w io.Writer) {
	h.flush()
	fmt.Fprintf(w, "Usage: icesink %s [flags]\n", h.fs.Name())
	for _, t := range h.topics {
		fmt.Fprintf(w, "\n%s:\n", t.name)
		for _, name := range t.flags {
			f := h.fs.Lookup(name)
			arg, usage := flag.UnquoteUsage(f)
			line := "  --" + f.Name
			if arg != "" {
				line += " " + arg
			}
			fmt.Fprintln(w, line)
			if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "[]" && d != "0s" {
				usage += fmt.Sprintf(" (default %s)", d)
			}
			fmt.Fprintf(w, "      %s\n", strings.ReplaceAll(usage, "\n", "\n      "))
		}
	}
	if h.fs.Lookup("config") != nil {
		fmt.Fprintln(w, "\nOne dash works too (-flag); every flag can be a key of the --config file.")
	} else {
		fmt.Fprintln(w, "\nOne dash works too (-flag).")
	}
}
