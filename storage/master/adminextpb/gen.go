// Package adminextpb holds the generated Go code of Tabula's admin
// extension services tabula.admin.v1.LocalityGroups (adminext.proto) and
// tabula.admin.v1.TabletOperations (tablets.proto).
package adminextpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative adminext.proto tablets.proto
