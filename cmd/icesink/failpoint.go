package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// failpointEnv names the environment variable crash tests set to kill the
// process (SIGKILL, as a machine failure would) at a named point of the
// writer: NAME or NAME:N, the N-th time (default the first) any writer
// reaches it. See deltawriter.Options.Failpoint for the names.
const failpointEnv = "ICESINK_FAILPOINT"

// failpointFromEnv returns the writer's failpoint hook that
// ICESINK_FAILPOINT asks for, or nil.
func failpointFromEnv() (func(string), error) {
	v := os.Getenv(failpointEnv)
	if v == "" {
		return nil, nil
	}
	name, nth, _ := strings.Cut(v, ":")
	n := 1
	if nth != "" {
		var err error
		if n, err = strconv.Atoi(nth); err != nil || n < 1 {
			return nil, fmt.Errorf("%s=%q: the count after the colon must be a positive number", failpointEnv, v)
		}
	}
	var hits atomic.Int64
	return func(point string) {
		if point == name && hits.Add(1) == int64(n) {
			if p, err := os.FindProcess(os.Getpid()); err == nil {
				p.Kill() // SIGKILL on Unix
			}
			select {} // the signal is on its way
		}
	}, nil
}
