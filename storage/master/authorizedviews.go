package master

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/longrunning/autogen/longrunningpb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/tabuladb/tabula/storage/meta"
)

// Authorized views (Cloud Bigtable's SubsetView) are kept in their table's
// catalog entry, so they are stored, versioned and replicated with the
// schema (the lock service's keys: DIR/coord.json in tabula dev, Consul
// in the cluster). The data API enforces them (package authview).

// MaxAuthorizedViewParams bounds the row prefixes, qualifiers and qualifier
// prefixes of one view, Cloud Bigtable's documented limit of 100
// definition parameters.
const MaxAuthorizedViewParams = 100

// viewName is a parsed authorized view name: the table's and the view ID.
type viewName struct {
	table tableName
	view  string
}

func (n viewName) String() string { return n.table.String() + "/authorizedViews/" + n.view }

func (s *AdminService) parseViewName(field, name string) (viewName, error) {
	i := strings.LastIndex(name, "/authorizedViews/")
	if i < 0 {
		return viewName{}, invalidArg(field, "%q is not projects/<project>/instances/<instance>/tables/<table>/authorizedViews/<view>", name)
	}
	t, err := s.parseTable(field, name[:i])
	if err != nil {
		return viewName{}, err
	}
	id := name[i+len("/authorizedViews/"):]
	if err := meta.ValidateAuthorizedViewID(id); err != nil {
		return viewName{}, invalidArg(field, "%v", err)
	}
	return viewName{table: t, view: id}, nil
}

// subsetView checks a SubsetView against the table's families and returns
// the view's definition.
func subsetView(field string, t meta.Table, sv *adminpb.AuthorizedView_SubsetView) (meta.AuthorizedView, error) {
	if sv == nil {
		return meta.AuthorizedView{}, invalidArg(field, "required: a view is a subset_view")
	}
	var v meta.AuthorizedView
	params := len(sv.GetRowPrefixes())
	for i, p := range sv.GetRowPrefixes() {
		if len(p) > 4096 {
			return meta.AuthorizedView{}, invalidArg(fmt.Sprintf("%s.row_prefixes[%d]", field, i), "prefix is %d bytes, the row key limit is 4096", len(p))
		}
		v.RowPrefixes = append(v.RowPrefixes, bytes.Clone(p))
	}
	v.Families = make(map[string]meta.FamilySubset, len(sv.GetFamilySubsets()))
	for _, fam := range slices.Sorted(maps.Keys(sv.GetFamilySubsets())) {
		ff := field + ".family_subsets[" + strconv.Quote(fam) + "]"
		if _, ok := t.Families[fam]; !ok {
			return meta.AuthorizedView{}, invalidArg(ff, "table %q has no column family %q", t.ID.Table, fam)
		}
		fs := sv.GetFamilySubsets()[fam]
		var out meta.FamilySubset
		for _, q := range fs.GetQualifiers() {
			out.Qualifiers = append(out.Qualifiers, bytes.Clone(q))
		}
		for _, p := range fs.GetQualifierPrefixes() {
			out.QualifierPrefixes = append(out.QualifierPrefixes, bytes.Clone(p))
		}
		if len(out.Qualifiers)+len(out.QualifierPrefixes) == 0 {
			return meta.AuthorizedView{}, invalidArg(ff, "names no qualifier and no qualifier prefix (\"\" covers the whole family)")
		}
		params += len(out.Qualifiers) + len(out.QualifierPrefixes)
		v.Families[fam] = out
	}
	if params > MaxAuthorizedViewParams {
		return meta.AuthorizedView{}, invalidArg(field, "%d row prefixes, qualifiers and qualifier prefixes, the limit is %d", params, MaxAuthorizedViewParams)
	}
	return v, nil
}

// authorizedViewProto renders a view in a response view: NAME_ONLY is the
// name; BASIC adds deletion protection and etag; FULL the subset too.
func authorizedViewProto(name string, v meta.AuthorizedView, view adminpb.AuthorizedView_ResponseView) *adminpb.AuthorizedView {
	out := &adminpb.AuthorizedView{Name: name}
	if view == adminpb.AuthorizedView_NAME_ONLY {
		return out
	}
	out.DeletionProtection = v.DeletionProtection
	out.Etag = v.Etag
	if view != adminpb.AuthorizedView_FULL {
		return out
	}
	sv := &adminpb.AuthorizedView_SubsetView{FamilySubsets: map[string]*adminpb.AuthorizedView_FamilySubsets{}}
	for _, p := range v.RowPrefixes {
		sv.RowPrefixes = append(sv.RowPrefixes, bytes.Clone(p))
	}
	for fam, fs := range v.Families {
		sv.FamilySubsets[fam] = &adminpb.AuthorizedView_FamilySubsets{Qualifiers: fs.Qualifiers, QualifierPrefixes: fs.QualifierPrefixes}
	}
	out.AuthorizedView = &adminpb.AuthorizedView_SubsetView_{SubsetView: sv}
	return out
}

// newEtag returns the etag of a view's version: the table's generation
// after the change, unique over the table's changes.
func newEtag(t meta.Table) string { return strconv.FormatUint(t.Generation+1, 10) }

// doneOperation wraps a finished change as the long-running operation the
// API returns, and keeps it for GetOperation.
func (s *AdminService) doneOperation(name string, md, resp proto.Message) (*longrunningpb.Operation, error) {
	mdAny, err := anypb.New(md)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	respAny, err := anypb.New(resp)
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	op := &longrunningpb.Operation{
		Name:     fmt.Sprintf("operations/%s/operations/%d", name, s.opSeq.Add(1)),
		Metadata: mdAny,
		Done:     true,
		Result:   &longrunningpb.Operation_Response{Response: respAny},
	}
	s.ops.add(op)
	return op, nil
}

// CreateAuthorizedView adds a view to a table: ALREADY_EXISTS if the ID is
// taken, INVALID_ARGUMENT for a family the table lacks (naming the
// field). The operation it returns is done.
func (s *AdminService) CreateAuthorizedView(ctx context.Context, req *adminpb.CreateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	tn, err := s.parseTable("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if err := meta.ValidateAuthorizedViewID(req.GetAuthorizedViewId()); err != nil {
		return nil, invalidArg("authorized_view_id", "%v", err)
	}
	n := viewName{table: tn, view: req.GetAuthorizedViewId()}
	start := s.opts.Now()
	var created meta.AuthorizedView
	_, err = s.update(ctx, tn, false, func(t *meta.Table) error {
		if _, ok := t.AuthorizedViews[n.view]; ok {
			return status.Errorf(codes.AlreadyExists, "authorized view %q already exists", n.String())
		}
		v, err := subsetView("authorized_view.subset_view", *t, req.GetAuthorizedView().GetSubsetView())
		if err != nil {
			return err
		}
		v.DeletionProtection = req.GetAuthorizedView().GetDeletionProtection()
		v.Etag = newEtag(*t)
		v.Created = s.opts.Now().UTC()
		t.AuthorizedViews = maps.Clone(t.AuthorizedViews)
		if t.AuthorizedViews == nil {
			t.AuthorizedViews = map[string]meta.AuthorizedView{}
		}
		t.AuthorizedViews[n.view] = v
		created = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.opts.Logger.Info("authorized view created", "table", tn.id, "view", n.view)
	return s.doneOperation(n.String(),
		&adminpb.CreateAuthorizedViewMetadata{OriginalRequest: req, RequestTime: timestamppb.New(start), FinishTime: timestamppb.New(s.opts.Now())},
		authorizedViewProto(n.String(), created, adminpb.AuthorizedView_FULL))
}

// view reads a table's view: NOT_FOUND naming it if there is none.
func (s *AdminService) view(ctx context.Context, n viewName) (meta.AuthorizedView, error) {
	t, err := s.get(ctx, n.table)
	if err != nil {
		return meta.AuthorizedView{}, err
	}
	v, ok := t.AuthorizedViews[n.view]
	if !ok {
		return meta.AuthorizedView{}, status.Errorf(codes.NotFound, "authorized view %q not found", n.String())
	}
	return v, nil
}

// GetAuthorizedView returns a view, whole (FULL) unless another view is
// asked for: the official client reads the subset from a request that
// names no view, as Cloud Bigtable answers it.
func (s *AdminService) GetAuthorizedView(ctx context.Context, req *adminpb.GetAuthorizedViewRequest) (*adminpb.AuthorizedView, error) {
	n, err := s.parseViewName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	v, err := s.view(ctx, n)
	if err != nil {
		return nil, err
	}
	rv := req.GetView()
	if rv == adminpb.AuthorizedView_RESPONSE_VIEW_UNSPECIFIED {
		rv = adminpb.AuthorizedView_FULL
	}
	return authorizedViewProto(n.String(), v, rv), nil
}

// ListAuthorizedViews lists a table's views by ID, NAME_ONLY unless another
// view is asked for; page_size bounds a page (0: all), the page token is
// the last ID of the previous page.
func (s *AdminService) ListAuthorizedViews(ctx context.Context, req *adminpb.ListAuthorizedViewsRequest) (*adminpb.ListAuthorizedViewsResponse, error) {
	tn, err := s.parseTable("parent", req.GetParent())
	if err != nil {
		return nil, err
	}
	if req.GetPageSize() < 0 {
		return nil, invalidArg("page_size", "must not be negative, got %d", req.GetPageSize())
	}
	t, err := s.get(ctx, tn)
	if err != nil {
		return nil, err
	}
	rv := req.GetView()
	if rv == adminpb.AuthorizedView_RESPONSE_VIEW_UNSPECIFIED {
		rv = adminpb.AuthorizedView_NAME_ONLY
	}
	resp := &adminpb.ListAuthorizedViewsResponse{}
	ids := slices.Sorted(maps.Keys(t.AuthorizedViews))
	for i, id := range ids {
		if req.GetPageToken() != "" && id <= req.GetPageToken() {
			continue
		}
		if req.GetPageSize() > 0 && len(resp.AuthorizedViews) == int(req.GetPageSize()) {
			resp.NextPageToken = ids[i-1]
			break
		}
		n := viewName{table: tn, view: id}
		resp.AuthorizedViews = append(resp.AuthorizedViews, authorizedViewProto(n.String(), t.AuthorizedViews[id], rv))
	}
	return resp, nil
}

// UpdateAuthorizedView changes a view's subset_view and/or
// deletion_protection (update_mask; empty: both as given). A request etag
// that is not the view's current one is ABORTED. The operation is done.
func (s *AdminService) UpdateAuthorizedView(ctx context.Context, req *adminpb.UpdateAuthorizedViewRequest) (*longrunningpb.Operation, error) {
	n, err := s.parseViewName("authorized_view.name", req.GetAuthorizedView().GetName())
	if err != nil {
		return nil, err
	}
	setSubset, setProtection := false, false
	paths := req.GetUpdateMask().GetPaths()
	if len(paths) == 0 {
		setSubset = req.GetAuthorizedView().GetSubsetView() != nil
		setProtection = true
	}
	for i, p := range paths {
		switch p {
		case "subset_view":
			setSubset = true
		case "deletion_protection":
			setProtection = true
		default:
			return nil, invalidArg(fmt.Sprintf("update_mask.paths[%d]", i), "unknown or immutable authorized view field %q (subset_view and deletion_protection may change)", p)
		}
	}
	start := s.opts.Now()
	var updated meta.AuthorizedView
	_, err = s.update(ctx, n.table, false, func(t *meta.Table) error {
		v, ok := t.AuthorizedViews[n.view]
		if !ok {
			return status.Errorf(codes.NotFound, "authorized view %q not found", n.String())
		}
		if e := req.GetAuthorizedView().GetEtag(); e != "" && e != v.Etag {
			return status.Errorf(codes.Aborted, "authorized_view.etag: %q is not the current etag of %q (it changed since it was read)", e, n.String())
		}
		if setSubset {
			nv, err := subsetView("authorized_view.subset_view", *t, req.GetAuthorizedView().GetSubsetView())
			if err != nil {
				return err
			}
			v.RowPrefixes, v.Families = nv.RowPrefixes, nv.Families
		}
		if setProtection {
			v.DeletionProtection = req.GetAuthorizedView().GetDeletionProtection()
		}
		v.Etag = newEtag(*t)
		t.AuthorizedViews = maps.Clone(t.AuthorizedViews)
		t.AuthorizedViews[n.view] = v
		updated = v
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s.doneOperation(n.String(),
		&adminpb.UpdateAuthorizedViewMetadata{OriginalRequest: req, RequestTime: timestamppb.New(start), FinishTime: timestamppb.New(s.opts.Now())},
		authorizedViewProto(n.String(), updated, adminpb.AuthorizedView_FULL))
}

// DeleteAuthorizedView removes a view: FAILED_PRECONDITION while its
// deletion protection is on, ABORTED for a stale etag, NOT_FOUND if there
// is none.
func (s *AdminService) DeleteAuthorizedView(ctx context.Context, req *adminpb.DeleteAuthorizedViewRequest) (*emptypb.Empty, error) {
	n, err := s.parseViewName("name", req.GetName())
	if err != nil {
		return nil, err
	}
	_, err = s.update(ctx, n.table, false, func(t *meta.Table) error {
		v, ok := t.AuthorizedViews[n.view]
		if !ok {
			return status.Errorf(codes.NotFound, "authorized view %q not found", n.String())
		}
		if e := req.GetEtag(); e != "" && e != v.Etag {
			return status.Errorf(codes.Aborted, "etag: %q is not the current etag of %q", e, n.String())
		}
		if v.DeletionProtection {
			return status.Errorf(codes.FailedPrecondition, "authorized view %q has deletion_protection on: turn it off (UpdateAuthorizedView) before deleting it", n.String())
		}
		t.AuthorizedViews = maps.Clone(t.AuthorizedViews)
		delete(t.AuthorizedViews, n.view)
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.opts.Logger.Info("authorized view deleted", "table", n.table.id, "view", n.view)
	return &emptypb.Empty{}, nil
}

// protectedView returns the ID of a view of t with deletion protection on,
// "" if none: such a view protects its table from deletion.
func protectedView(t meta.Table) string {
	for _, id := range slices.Sorted(maps.Keys(t.AuthorizedViews)) {
		if t.AuthorizedViews[id].DeletionProtection {
			return id
		}
	}
	return ""
}
