// Package jobs holds the built-in MapReduce jobs, registered by name with
// package mapreduce when imported — HBase's tools under their names:
// rowcounter, copytable, verify (VerifyReplication's comparison), export
// and import (rowfile's Parquet and JSON Lines), plus wordcount (the
// Webtable's anchor texts, an example of a Go job with a combiner) and
// script (any script of package scripts as a job: the script is the mapper,
// run inside the tablet servers over each split, its aggregator tables the
// reducer).
//
// Each job's configuration is the JSON of its Conf type; the CLI (tabula mr
// run) builds it from flags, a worker in another process rebuilds the job
// from it.
package jobs

import (
	"encoding/json"
	"errors"
	"fmt"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/mapreduce"
)

// TableSpec is a table input as configuration: the rows, cells and filters
// a job reads.
type TableSpec struct {
	// Addr is the cluster (default: the job's).
	Addr  string `json:"addr,omitempty"`
	Table string `json:"table"`
	// Start, End bound the rows to [Start, End); Prefix, instead, selects
	// rows starting with it.
	Start  []byte `json:"start,omitempty"`
	End    []byte `json:"end,omitempty"`
	Prefix []byte `json:"prefix,omitempty"`
	// Families keeps only these families; MaxVersions the newest versions
	// of each column (0: all).
	Families    []string `json:"families,omitempty"`
	MaxVersions int      `json:"max_versions,omitempty"`
	// StartTime, EndTime: cells with timestamps in [StartTime, EndTime)
	// µs (EndTime 0: up to the job's start).
	StartTime int64 `json:"start_time,omitempty"`
	EndTime   int64 `json:"end_time,omitempty"`
	// Filter is a serialized bigtablepb.RowFilter (proto wire format).
	Filter []byte `json:"filter,omitempty"`
	// Where is the source of a filter script run inside the servers.
	Where string `json:"where,omitempty"`
	// SplitBytes sub-splits larger tablets (0: the default).
	SplitBytes int64 `json:"split_bytes,omitempty"`
}

// Input returns the spec as a table input.
func (s TableSpec) Input() (*mapreduce.TableInput, error) {
	if s.Table == "" {
		return nil, errors.New("table: required")
	}
	in := &mapreduce.TableInput{Addr: s.Addr, Table: s.Table, Start: s.Start, End: s.End, Prefix: s.Prefix,
		Families: s.Families, MaxVersions: s.MaxVersions, StartTime: s.StartTime, EndTime: s.EndTime,
		Script: s.Where, SplitBytes: s.SplitBytes}
	if len(s.Filter) > 0 {
		in.Filter = &bigtablepb.RowFilter{}
		if err := proto.Unmarshal(s.Filter, in.Filter); err != nil {
			return nil, fmt.Errorf("filter: %w", err)
		}
	}
	if s.StartTime < 0 || s.EndTime < 0 || s.EndTime != 0 && s.EndTime <= s.StartTime {
		return nil, fmt.Errorf("time range [%d, %d): want 0 ≤ start < end", s.StartTime, s.EndTime)
	}
	if s.MaxVersions < 0 {
		return nil, fmt.Errorf("max_versions %d: want ≥ 0", s.MaxVersions)
	}
	return in, nil
}

// SetFilter stores f in the spec.
func (s *TableSpec) SetFilter(f *bigtablepb.RowFilter) error {
	if f == nil {
		s.Filter = nil
		return nil
	}
	b, err := proto.Marshal(f)
	s.Filter = b
	return err
}

// OutputSpec is a job's output as configuration: a table, files, or
// nothing.
type OutputSpec struct {
	// Table (on Addr, default the job's cluster), or
	Table string `json:"table,omitempty"`
	Addr  string `json:"addr,omitempty"`
	// URL (a directory or s3://…) with Format "jsonl" or "parquet".
	URL    string `json:"url,omitempty"`
	Format string `json:"format,omitempty"`
}

// Output returns the spec as an output (nil: counters only).
func (o OutputSpec) Output() (mapreduce.Output, error) {
	switch {
	case o.Table != "" && o.URL != "":
		return nil, errors.New("output: a table or a URL, not both")
	case o.Table != "":
		return &mapreduce.TableOutput{Addr: o.Addr, Table: o.Table}, nil
	case o.URL != "":
		f := o.Format
		if f == "" {
			f = "jsonl"
		}
		return &mapreduce.FileOutput{URL: o.URL, Format: f}, nil
	}
	return nil, nil
}

// decode decodes a job's JSON configuration strictly (unknown fields are
// errors, so that a misspelt option is not silently dropped).
func decode(conf []byte, v any) error {
	if len(conf) == 0 {
		return errors.New("empty configuration")
	}
	dec := json.NewDecoder(bytesReader(conf))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

// Conf encodes a job configuration as the JSON its builder decodes.
func Conf(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // the Conf types marshal
	}
	return b
}
