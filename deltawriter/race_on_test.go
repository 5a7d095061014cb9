//go:build race

package deltawriter_test

const raceEnabled = true
