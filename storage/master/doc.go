// Package master is Tabula's master: the schema of tables and, in the
// cluster, the assignment of their tablets to tablet servers.
//
// AdminService implements the Cloud Bigtable table admin API
// (google.bigtable.admin.v2.BigtableTableAdmin) over a meta.Catalog, the
// durable record of every table's schema and initial tablets, and a
// TableHost, the tablet servers that serve those tablets.
// LocalityGroupService is Tabula's admin extension for what the Cloud API
// has no field for: the paper's locality groups.
//
// Every schema change of a table is serialised (one lock per table), checked
// whole before anything changes, persisted in the catalog and only then
// applied to the tablets, so that a restart (Start) reopens every table with
// the schema that clients were told about.
package master
