// Package coordpb is the generated protobuf and gRPC code of the
// coordinator's wire protocol (coordinator.proto). Do not edit the .pb.go
// files; regenerate them as coordinator/doc.go describes.
package coordpb

// Needs protoc (Debian: protobuf-compiler) and the plugins on PATH:
//   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative coordinator.proto
