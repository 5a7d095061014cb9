package postgres

import (
	"errors"
	"fmt"
	"io"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestTransient: a lost connection or a server shutting down is retried;
// a refusal (a wrong password, a missing database) and no error are not.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{fmt.Errorf("resuming after epoch 0: table t: connecting: %w", syscall.ECONNREFUSED), true},
		{fmt.Errorf("reading: %w", io.ErrUnexpectedEOF), true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is shutting down"}, true},
		{&pgconn.PgError{Code: "28P01", Message: "password authentication failed"}, false},
		{&pgconn.PgError{Code: "3D000", Message: "database does not exist"}, false},
		{errors.New("table app.t has no primary key"), false},
	} {
		if got := transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
