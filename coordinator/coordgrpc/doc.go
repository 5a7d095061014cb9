// Package coordgrpc carries coordinator sessions over gRPC: one
// bidirectional stream per writer (coordpb.Coordinator.Session). Serve (or
// Register on your own grpc.Server) exposes a coordinator.Coordinator; Dial
// (or Connect on your own connection) gives a writer a coordinator.Session
// that behaves like an in-process one. A stream that breaks is the writer
// leaving: with a window in flight, every writer is told to abort.
// Errors keep their meaning across the wire: errors.Is matches the same
// coordinator sentinels, and an abort arrives as a *coordinator.AbortError.
package coordgrpc
