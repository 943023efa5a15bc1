package datasession

import (
	"bytes"
	"context"
	"fmt"
	"io"

	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/tabuladb/tabula/storage/filter"
	"github.com/tabuladb/tabula/storage/tabletserver"
)

// rowStream is the server stream a session's ReadRow runs its ReadRows
// on: it hands the handler the request once, and takes the row whole
// (takeRow, from a tablet served here) or merges the responses' chunks
// into it (SendMsg, from a tablet a gateway reaches elsewhere).
type rowStream struct {
	ctx      context.Context
	req      *bigtablepb.ReadRowsRequest
	received bool
	rows     chunkMerger
	taken    *bigtablepb.Row
}

// takeRow is the stream's tabletserver.RowTaker: it builds the row as
// chunkMerger would from the chunks of cells — a family each time the
// family changes from one cell to the next, a column each time the
// family or the qualifier does — with the cells' bytes shared, not
// copied (they are immutable: tabletserver.RowTaker).
func (s *rowStream) takeRow(key []byte, cells []filter.LabeledCell) error {
	if s.taken != nil || s.rows.row != nil {
		return status.Error(codes.Internal, "datasession: ReadRows returned a second row for one key")
	}
	row := &bigtablepb.Row{Key: key}
	slab := make([]bigtablepb.Cell, len(cells)) // one allocation for the row's cells
	var family *bigtablepb.Family
	var column *bigtablepb.Column
	for i := range cells {
		c := &cells[i]
		if i == 0 || c.Family != cells[i-1].Family {
			family = &bigtablepb.Family{Name: c.Family}
			row.Families = append(row.Families, family)
			column = nil
		}
		if column == nil || !bytes.Equal(c.Qualifier, cells[i-1].Qualifier) {
			column = &bigtablepb.Column{Qualifier: c.Qualifier}
			family.Columns = append(family.Columns, column)
		}
		cl := &slab[i]
		cl.TimestampMicros, cl.Value, cl.Labels = c.Timestamp, c.Value, c.Labels
		column.Cells = append(column.Cells, cl)
	}
	s.taken = row
	return nil
}

// result returns the row read (nil when none was, or the filter left no
// cell).
func (s *rowStream) result() (*bigtablepb.Row, error) {
	if s.taken != nil {
		if s.rows.row != nil {
			return nil, status.Error(codes.Internal, "datasession: ReadRows returned a second row for one key")
		}
		return s.taken, nil
	}
	return s.rows.result()
}

func (s *rowStream) Context() context.Context     { return s.ctx }
func (s *rowStream) SetHeader(metadata.MD) error  { return nil }
func (s *rowStream) SendHeader(metadata.MD) error { return nil }
func (s *rowStream) SetTrailer(metadata.MD)       {}

// RecvMsg delivers the request, once.
func (s *rowStream) RecvMsg(m any) error {
	if s.received {
		return io.EOF
	}
	req, ok := m.(*bigtablepb.ReadRowsRequest)
	if !ok {
		return fmt.Errorf("datasession: ReadRows receives into %T", m)
	}
	s.received = true
	setReadRows(req, s.req)
	return nil
}

// setReadRows sets the fields of dst, a fresh request, that a session's
// ReadRow sets in src (proto.Merge would, by reflection, at a tenth of a
// point read's CPU). The nested messages are shared: nothing modifies
// them.
func setReadRows(dst, src *bigtablepb.ReadRowsRequest) {
	dst.TableName, dst.AuthorizedViewName, dst.AppProfileId = src.TableName, src.AuthorizedViewName, src.AppProfileId
	dst.Rows, dst.Filter, dst.RowsLimit = src.Rows, src.Filter, src.RowsLimit
}

// SendMsg takes a response: a ReadRowsResponse, or one in wire form (a
// gateway relays a remote tablet's answer so).
func (s *rowStream) SendMsg(m any) error {
	switch r := m.(type) {
	case *bigtablepb.ReadRowsResponse:
		return s.rows.add(r)
	case *tabletserver.EncodedReadRows:
		var resp bigtablepb.ReadRowsResponse
		err := proto.Unmarshal(r.Bytes(), &resp)
		r.Release()
		if err != nil {
			return status.Errorf(codes.Internal, "datasession: undecodable ReadRows response: %v", err)
		}
		return s.rows.add(&resp)
	}
	return fmt.Errorf("datasession: ReadRows sends %T", m)
}

// chunkMerger assembles the CellChunks of a ReadRows answer to one row
// key into a Row, by the rules of ReadRowsResponse.CellChunk: a chunk
// without row_key, family or qualifier continues the previous cell's; a
// value in pieces has value_size set on all but its last piece;
// reset_row drops what the row had; commit_row ends it.
type chunkMerger struct {
	row       *bigtablepb.Row
	committed bool
	family    *bigtablepb.Family
	column    *bigtablepb.Column
	cell      *bigtablepb.Cell // the cell whose value is still in pieces, if any
}

func (m *chunkMerger) add(r *bigtablepb.ReadRowsResponse) error {
	for _, c := range r.GetChunks() {
		if err := m.chunk(c); err != nil {
			return status.Errorf(codes.Internal, "datasession: ReadRows answer: %v", err)
		}
	}
	return nil
}

func (m *chunkMerger) chunk(c *bigtablepb.ReadRowsResponse_CellChunk) error {
	if m.committed {
		return fmt.Errorf("a chunk after the row was committed (a second row for one key)")
	}
	if c.GetResetRow() {
		m.row, m.family, m.column, m.cell = nil, nil, nil, nil
		return nil
	}
	if m.cell != nil {
		// The next piece of a value.
		m.cell.Value = append(m.cell.Value, c.GetValue()...)
	} else {
		if len(c.GetRowKey()) > 0 {
			if m.row == nil {
				m.row = &bigtablepb.Row{Key: c.GetRowKey()}
			}
		}
		if m.row == nil {
			return fmt.Errorf("a cell before its row key")
		}
		if c.GetFamilyName() != nil {
			m.family = &bigtablepb.Family{Name: c.GetFamilyName().GetValue()}
			m.row.Families = append(m.row.Families, m.family)
			m.column = nil
		}
		if c.GetQualifier() != nil {
			if m.family == nil {
				return fmt.Errorf("a qualifier before its family")
			}
			m.column = &bigtablepb.Column{Qualifier: c.GetQualifier().GetValue()}
			m.family.Columns = append(m.family.Columns, m.column)
		}
		if m.column == nil {
			return fmt.Errorf("a cell before its column")
		}
		cell := &bigtablepb.Cell{TimestampMicros: c.GetTimestampMicros(), Labels: c.GetLabels()}
		if c.GetValueSize() > 0 {
			cell.Value = make([]byte, 0, c.GetValueSize())
		}
		cell.Value = append(cell.Value, c.GetValue()...)
		m.column.Cells = append(m.column.Cells, cell)
		m.cell = cell
	}
	if c.GetValueSize() == 0 {
		m.cell = nil // the value is whole
	}
	if c.GetCommitRow() {
		if m.cell != nil {
			return fmt.Errorf("row committed in the middle of a value")
		}
		m.committed = true
	}
	return nil
}

// result returns the row read: nil when none was (or the filter left no
// cell); an error when the answer ended in the middle of a row.
func (m *chunkMerger) result() (*bigtablepb.Row, error) {
	if m.row != nil && !m.committed {
		return nil, status.Error(codes.Internal, "datasession: ReadRows answer ended before its row was committed")
	}
	if m.row == nil || len(m.row.Families) == 0 {
		return nil, nil
	}
	return m.row, nil
}
