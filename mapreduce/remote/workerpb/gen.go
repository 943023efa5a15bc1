// Package workerpb holds the generated Go code of Tabula's MapReduce worker
// protocol (worker.proto): running task attempts on workers, fetching map
// output partitions from them, and watching that they are alive.
package workerpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative worker.proto
