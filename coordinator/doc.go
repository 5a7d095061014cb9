// Package coordinator aligns the commit payloads of parallel writers by
// epoch and vnode and decides when an epoch commits.
package coordinator
