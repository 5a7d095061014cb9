// Command icesink writes upsert (CDC) streams into Apache Iceberg tables
// with a hard memory bound per writer, and reads them back.
//
//	icesink run       --warehouse DIR --table NS.NAME [--schema F] --input F|-   write a changelog
//	icesink scan      --warehouse DIR --table NS.NAME                            live rows as JSON lines
//	icesink snapshots --warehouse DIR --table NS.NAME                            snapshots and summaries
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"time"

	"github.com/apache/iceberg-go"
	icebergio "github.com/apache/iceberg-go/io"
	"github.com/dustin/go-humanize"

	"github.com/icesink/icesink/commit"
	"github.com/icesink/icesink/coordinator/coordgrpc"
	"github.com/icesink/icesink/sink"
	"github.com/icesink/icesink/warehouse"
)

const usage = `icesink writes upsert (CDC) streams into Apache Iceberg tables.

Commands:
  run        write a changelog into a table (creating it from --schema)
  scan       print a table's live rows as JSON lines (iceberg-go's scanner)
  snapshots  list a table's snapshots with their summaries
  maintain   compact a table's small files, expire its history, merge its manifests (one shot)
  coordinator  serve the vnode-aligned commit coordinator to writers in other processes
  bench      benchmark memory and throughput of upsert scenarios
  version    print the version of icesink and of iceberg-go it writes with

Run "icesink COMMAND -h" for a command's flags.
`

func main() {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sigs
		signal.Stop(sigs) // a second Ctrl-C kills at once
		cancel(stopSignal{s})
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// cmdVersion prints the module version (or the VCS revision of a local
// build) and the versions of the libraries that decide the table format.
func cmdVersion(stdout io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		_, err := fmt.Fprintln(stdout, "icesink (no build information)")
		return err
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && (v == "" || v == "(devel)") {
			v = "devel " + s.Value
		}
	}
	fmt.Fprintf(stdout, "icesink %s (%s)\n", v, bi.GoVersion)
	for _, d := range bi.Deps {
		switch d.Path {
		case "github.com/apache/iceberg-go", "github.com/apache/arrow-go/v18":
			fmt.Fprintf(stdout, "  %s %s\n", d.Path, d.Version)
		}
	}
	return nil
}

// stopSignal is the cause of the command's context when a signal stopped
// it.
type stopSignal struct{ sig os.Signal }

func (s stopSignal) Error() string { return "stopped by " + s.name() }

func (s stopSignal) name() string {
	if s.sig == syscall.SIGTERM {
		return "SIGTERM"
	}
	return "SIGINT"
}

// exitCode is the shell's convention for a process a signal stopped.
func (s stopSignal) exitCode() int {
	if n, ok := s.sig.(syscall.Signal); ok {
		return 128 + int(n)
	}
	return 130
}

// errUsage marks a command-line mistake (exit code 2).
var errUsage = errors.New("usage")

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	var err error
	switch args[0] {
	case "run":
		err = cmdRun(ctx, args[1:], stdin, stdout, stderr)
	case "scan":
		err = cmdScan(ctx, args[1:], stdout, stderr)
	case "snapshots":
		err = cmdSnapshots(ctx, args[1:], stdout, stderr)
	case "maintain":
		err = cmdMaintain(ctx, args[1:], stdout, stderr)
	case "coordinator":
		err = cmdCoordinator(ctx, args[1:], stdout, stderr)
	case "bench":
		err = cmdBench(ctx, args[1:], stdout, stderr)
	case "version", "--version":
		err = cmdVersion(stdout)
	default:
		fmt.Fprintf(stderr, "icesink: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "icesink %s: %v\n", args[0], err)
		return 2
	default:
		if sig, ok := context.Cause(ctx).(stopSignal); ok {
			// Whatever was cut short (an open window, a commit under way)
			// is aborted or recorded: a rerun continues from the table.
			fmt.Fprintf(stderr, "icesink %s: %s; the table keeps what was committed, and running the same command again continues from there\n", args[0], sig.Error())
			return sig.exitCode()
		}
		fmt.Fprintf(stderr, "icesink %s: %v\n", args[0], err)
		return 1
	}
}

// tableFlags are the flags every command takes to find its table.
type tableFlags struct {
	warehouse  string
	table      string
	catalogURI string
	s3Endpoint string
	s3Region   string
	props      propertyFlag
}

func (t *tableFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.warehouse, "warehouse", "", "warehouse `DIR` (embedded SQLite catalog at DIR/catalog.db, table data under DIR), or s3://BUCKET/PATH with --catalog-uri")
	fs.StringVar(&t.table, "table", "", "table `NS.NAME`")
	fs.StringVar(&t.catalogURI, "catalog-uri", "", "catalog `URI`: postgres://..., sqlite:FILE or an Iceberg REST catalog's http(s)://...; default: the embedded SQLite catalog in the warehouse folder")
	fs.StringVar(&t.s3Endpoint, "s3-endpoint", "", "S3 endpoint `URL` of an s3:// warehouse (an S3-compatible server; path-style addressing); default: AWS")
	fs.StringVar(&t.s3Region, "s3-region", "", "S3 `REGION` of an s3:// warehouse (default: AWS_REGION, or us-east-1)")
	t.props = propertyFlag{}
	fs.Var(t.props, "catalog-property", "catalog and file IO property `KEY=VALUE` (repeatable), e.g. s3.access-key-id=...; credentials otherwise come from the AWS environment")
}

// options returns the warehouse options the flags give.
func (t *tableFlags) options() warehouse.Options {
	o := warehouse.Options{CatalogURI: t.catalogURI, Properties: iceberg.Properties{}}
	for k, v := range t.props {
		o.Properties[k] = v
	}
	if t.s3Endpoint != "" {
		o.Properties[icebergio.S3EndpointURL] = t.s3Endpoint
	}
	region := t.s3Region
	if region == "" {
		region = os.Getenv("AWS_REGION")
	}
	if region == "" && warehouse.IsObjectStore(t.warehouse) {
		region = "us-east-1"
	}
	if region != "" {
		o.Properties[icebergio.S3Region] = region
	}
	return o
}

// localStateDir returns the default folder of the coordinator's state:
// under a local warehouse, one per table and sink (two sinks with the
// default sink id on two tables of one warehouse must not share it); an
// object-storage warehouse needs --state-dir.
func (t *tableFlags) localStateDir(sinkID string) (string, error) {
	if warehouse.IsObjectStore(t.warehouse) {
		return "", fmt.Errorf("%w: --state-dir: with an object-storage warehouse, give a local folder for the coordinator's checkpoints", errUsage)
	}
	return filepath.Join(t.warehouse, "_icesink", t.table, sinkID), nil
}

func (t *tableFlags) check() error {
	if t.warehouse == "" {
		return fmt.Errorf("%w: --warehouse is required", errUsage)
	}
	if t.table == "" {
		return fmt.Errorf("%w: --table is required", errUsage)
	}
	return nil
}

// securityFlags secure the coordinator's gRPC endpoint: TLS and a shared
// token. Without them the coordinator accepts any writer that reaches its
// port, so it must listen only on loopback or a trusted network.
type securityFlags struct {
	cert, key, ca, tokenFile string
	server                   bool
}

func (f *securityFlags) register(fs *flag.FlagSet, server bool) {
	f.server = server
	if server {
		fs.StringVar(&f.cert, "tls-cert", "", "serve writers over TLS with this certificate `FILE` (PEM); with --tls-key")
		fs.StringVar(&f.key, "tls-key", "", "the TLS certificate's key `FILE` (PEM)")
		fs.StringVar(&f.ca, "tls-client-ca", "", "require writers to present a certificate signed by this CA `FILE` (mutual TLS)")
	} else {
		fs.StringVar(&f.ca, "tls-ca", "", "with --coordinator: connect over TLS, trusting this CA `FILE` (PEM) for the coordinator's certificate")
		fs.StringVar(&f.cert, "tls-cert", "", "with --coordinator: this writer's certificate `FILE` for mutual TLS; with --tls-key")
		fs.StringVar(&f.key, "tls-key", "", "with --coordinator: the writer certificate's key `FILE`")
	}
	fs.StringVar(&f.tokenFile, "auth-token-file", "", "a `FILE` holding a shared token; the coordinator refuses writers without it")
}

func (f *securityFlags) security() (coordgrpc.Security, error) {
	var sec coordgrpc.Security
	var err error
	if f.tokenFile != "" {
		if sec.Token, err = coordgrpc.ReadToken(f.tokenFile); err != nil {
			return sec, err
		}
	}
	switch {
	case f.server && (f.cert != "") != (f.key != ""):
		return sec, fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	case f.server && f.cert != "":
		sec.TLS, err = coordgrpc.LoadServerTLS(f.cert, f.key, f.ca)
	case f.server && f.ca != "":
		return sec, fmt.Errorf("%w: --tls-client-ca needs --tls-cert and --tls-key", errUsage)
	case !f.server && (f.cert != "") != (f.key != ""):
		return sec, fmt.Errorf("%w: --tls-cert and --tls-key go together", errUsage)
	case !f.server && (f.ca != "" || f.cert != ""):
		sec.TLS, err = coordgrpc.LoadClientTLS(f.ca, f.cert, f.key)
	}
	return sec, err
}

// retentionFlags bound the table history the committer leaves (see
// commit.Retention): `run` and `coordinator` take them.
type retentionFlags struct {
	retain, maxManifests int
	olderThan            time.Duration
}

func (r *retentionFlags) register(fs *flag.FlagSet) {
	d := commit.DefaultRetention()
	fs.IntVar(&r.retain, "retain-snapshots", d.RetainSnapshots, "keep the newest `N` snapshots; older ones expire after commits (0: keep all history)")
	fs.DurationVar(&r.olderThan, "expire-older-than", d.OlderThan, "only snapshots older than this `DURATION` expire (protects readers planning on recent ones)")
	fs.IntVar(&r.maxManifests, "max-manifests", d.MaxDataManifests, "merge the data manifests, and the delete manifests, when the table's snapshot has more than `N` of them (at most 8 on a format v3 table, whose commits read them all; 0: never)")
}

func (r *retentionFlags) retention() (*commit.Retention, error) {
	if r.retain < 0 || r.maxManifests < 0 || r.olderThan < 0 {
		return nil, fmt.Errorf("%w: --retain-snapshots, --max-manifests and --expire-older-than must not be negative", errUsage)
	}
	return &commit.Retention{RetainSnapshots: r.retain, OlderThan: r.olderThan, MaxDataManifests: r.maxManifests, MaxDeleteManifests: r.maxManifests}, nil
}

// compactionFlags set the sink's compaction (commit.Compaction): `run
// --maintain` and `maintain` take them.
type compactionFlags struct {
	every, minFiles  int
	maxBytes, target string
}

func (c *compactionFlags) register(fs *flag.FlagSet, run bool) {
	d := commit.DefaultCompaction()
	if run {
		fs.IntVar(&c.every, "compact-every", 10, "with --maintain: a compaction round every `N` commits")
	}
	fs.IntVar(&c.minFiles, "compact-min-files", d.MinInputFiles, "rewrite a partition's small files once there are `N` of them")
	fs.StringVar(&c.maxBytes, "compact-max-bytes", humanize.IBytes(uint64(d.MaxInputBytes)), "data files one compaction round reads at most (`SIZE`; a round delays the next commit)")
	fs.StringVar(&c.target, "compact-target-size", "", "`SIZE` of the files a compaction writes (default: the table's write.target-file-size-bytes)")
}

func (c *compactionFlags) compaction() (*commit.Compaction, error) {
	if c.minFiles < 2 {
		return nil, fmt.Errorf("%w: --compact-min-files must be at least 2", errUsage)
	}
	maxBytes, err := parseSize(c.maxBytes)
	if err != nil || maxBytes <= 0 {
		return nil, fmt.Errorf("%w: --compact-max-bytes %q: want a positive size such as 256MiB", errUsage, c.maxBytes)
	}
	var target int64
	if c.target != "" {
		if target, err = parseSize(c.target); err != nil || target <= 0 {
			return nil, fmt.Errorf("%w: --compact-target-size %q: want a positive size such as 128MiB", errUsage, c.target)
		}
	}
	return &commit.Compaction{MinInputFiles: c.minFiles, MaxInputBytes: maxBytes, TargetFileSize: target}, nil
}

// timeoutFlags bound the coordinator's waits (sink.Timeouts): `run` (its
// in-process coordinator) and `coordinator` take them.
type timeoutFlags struct{ align, payload, commit time.Duration }

func (t *timeoutFlags) register(fs *flag.FlagSet) {
	fs.DurationVar(&t.align, "align-timeout", 60*time.Second, "fail an epoch whose vnodes have not all reported within this `DURATION` of its first report")
	fs.DurationVar(&t.payload, "payload-timeout", 60*time.Second, "fail a commit epoch whose writers have not all sent their files within this `DURATION` of its decision")
	fs.DurationVar(&t.commit, "commit-timeout", 5*time.Minute, "give up one attempt to commit an epoch to the catalog after this `DURATION` (it is retried)")
}

func (t *timeoutFlags) timeouts() (sink.Timeouts, error) {
	if t.align <= 0 || t.payload <= 0 || t.commit <= 0 {
		return sink.Timeouts{}, fmt.Errorf("%w: --align-timeout, --payload-timeout and --commit-timeout must be positive", errUsage)
	}
	return sink.Timeouts{Align: t.align, Payload: t.payload, Commit: t.commit}, nil
}

func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}
