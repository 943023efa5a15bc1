package guard

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
	"cloud.google.com/go/bigtable/apiv2/bigtablepb"
	"cloud.google.com/go/iam/apiv1/iampb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tabuladb/tabula/security/acl"
)

type ruleKind int

const (
	ruleTable         ruleKind = iota // check against the table's grants
	ruleAuthenticated                 // any authenticated caller
	ruleSuperuser                     // superusers only
)

// rule is what one method needs.
type rule struct {
	kind ruleKind
	// check decides a request on table (and may narrow it in place).
	check func(s acl.Subject, table string, info TableInfo, req any) error
	// answer, for a unary method the guard answers itself.
	answer func(ctx context.Context, g *Guard, c *call, req any) (any, error)
	// filterResponse narrows a successful response to what the caller
	// may see.
	filterResponse func(ctx context.Context, g *Guard, c *call, resp any) any
	// change marks grant and schema changes (audited when they succeed).
	change bool
	// deleted: a table not found is looked up among the deleted ones
	// (Config.Deleted) — UndeleteTable's.
	deleted bool
}

// table returns the table a request names.
func (r rule) table(req any) (string, error) {
	t := tableOf(req)
	if t == "" {
		return "", status.Error(codes.InvalidArgument, "the request names no table (projects/P/instances/I/tables/T)")
	}
	return t, nil
}

const (
	dataPrefix   = "/google.bigtable.v2.Bigtable/"
	adminPrefix  = "/google.bigtable.admin.v2.BigtableTableAdmin/"
	scriptPrefix = "/tabula.scripts.v1.Scripts/"
)

// rules maps every method the guard knows to its rule; any other method is
// for superusers (deny by default), unless Config.Relayed names it.
var rules = map[string]rule{
	// --- google.bigtable.v2.Bigtable ---
	dataPrefix + "ReadRows":                              {check: checkReadRows},
	dataPrefix + "SampleRowKeys":                         {check: needSome(acl.Read)},
	dataPrefix + "MutateRow":                             {check: checkMutateRow},
	dataPrefix + "MutateRows":                            {check: checkMutateRows},
	dataPrefix + "CheckAndMutateRow":                     {check: checkCheckAndMutate},
	dataPrefix + "ReadModifyWriteRow":                    {check: checkReadModifyWrite},
	dataPrefix + "PingAndWarm":                           {kind: ruleAuthenticated},
	dataPrefix + "GetClientConfiguration":                {kind: ruleAuthenticated},
	dataPrefix + "GenerateInitialChangeStreamPartitions": {check: needTable(acl.Read)},
	dataPrefix + "ReadChangeStream":                      {check: needTable(acl.Read)},
	// SQL may read any table of the instance.
	dataPrefix + "PrepareQuery": {kind: ruleSuperuser},
	dataPrefix + "ExecuteQuery": {kind: ruleSuperuser},
	// A session's stream only carries calls: the server runs each through
	// its interceptors, this guard's among them, as the classic call it
	// stands for (storage/datasession), which is checked as such.
	dataPrefix + "OpenTable":            {kind: ruleAuthenticated},
	dataPrefix + "OpenAuthorizedView":   {kind: ruleAuthenticated},
	dataPrefix + "OpenMaterializedView": {kind: ruleSuperuser},

	// --- tabula.scripts.v1.Scripts: scripts run with the caller's rights ---
	scriptPrefix + "Run":         {check: checkScriptRun},
	scriptPrefix + "ListTablets": {check: needSome(acl.Read)},

	// --- google.bigtable.admin.v2.BigtableTableAdmin ---
	adminPrefix + "CreateTable":              {kind: ruleSuperuser, change: true},
	adminPrefix + "CreateTableFromSnapshot":  {kind: ruleSuperuser, change: true},
	adminPrefix + "ListTables":               {kind: ruleAuthenticated, filterResponse: filterListTables},
	adminPrefix + "GetTable":                 {check: needSome(acl.Read)},
	adminPrefix + "UpdateTable":              {check: needTable(acl.Admin), change: true},
	adminPrefix + "DeleteTable":              {check: needTable(acl.Admin), change: true},
	adminPrefix + "UndeleteTable":            {check: needTable(acl.Admin), change: true, deleted: true},
	adminPrefix + "CreateAuthorizedView":     {check: needTable(acl.Admin), change: true},
	adminPrefix + "ListAuthorizedViews":      {check: needSome(acl.Read)},
	adminPrefix + "GetAuthorizedView":        {check: needSome(acl.Read)},
	adminPrefix + "UpdateAuthorizedView":     {check: needTable(acl.Admin), change: true},
	adminPrefix + "DeleteAuthorizedView":     {check: needTable(acl.Admin), change: true},
	adminPrefix + "ModifyColumnFamilies":     {check: needTable(acl.Admin), change: true},
	adminPrefix + "DropRowRange":             {check: needTable(acl.Admin), change: true},
	adminPrefix + "GenerateConsistencyToken": {check: needSome(acl.Read)},
	adminPrefix + "CheckConsistency":         {check: needSome(acl.Read)},
	adminPrefix + "SnapshotTable":            {kind: ruleSuperuser, change: true},
	adminPrefix + "GetSnapshot":              {kind: ruleSuperuser},
	adminPrefix + "ListSnapshots":            {kind: ruleSuperuser},
	adminPrefix + "DeleteSnapshot":           {kind: ruleSuperuser, change: true},
	// Backups outlive their table and restore into new tables: the
	// instance's business.
	adminPrefix + "CreateBackup":       {kind: ruleSuperuser, change: true},
	adminPrefix + "GetBackup":          {kind: ruleSuperuser},
	adminPrefix + "UpdateBackup":       {kind: ruleSuperuser, change: true},
	adminPrefix + "DeleteBackup":       {kind: ruleSuperuser, change: true},
	adminPrefix + "ListBackups":        {kind: ruleSuperuser},
	adminPrefix + "RestoreTable":       {kind: ruleSuperuser, change: true},
	adminPrefix + "CopyBackup":         {kind: ruleSuperuser, change: true},
	adminPrefix + "GetIamPolicy":       {check: needTable(acl.Admin)},
	adminPrefix + "SetIamPolicy":       {check: needTable(acl.Admin), change: true},
	adminPrefix + "TestIamPermissions": {answer: answerTestIamPermissions},
	adminPrefix + "CreateSchemaBundle": {check: needTable(acl.Admin), change: true},
	adminPrefix + "UpdateSchemaBundle": {check: needTable(acl.Admin), change: true},
	adminPrefix + "GetSchemaBundle":    {check: needSome(acl.Read)},
	adminPrefix + "ListSchemaBundles":  {check: needSome(acl.Read)},
	adminPrefix + "DeleteSchemaBundle": {check: needTable(acl.Admin), change: true},

	// --- Tabula's admin extension and the operations of UpdateTable ---
	"/tabula.admin.v1.LocalityGroups/SetLocalityGroup":  {check: needTable(acl.Admin), change: true},
	"/tabula.admin.v1.LocalityGroups/GetLocalityGroups": {check: needSome(acl.Read)},
	"/google.longrunning.Operations/GetOperation":       {kind: ruleAuthenticated},

	// --- MapReduce workers: tasks run as their submitter (the worker's
	// reads and writes carry the submitter's token and are checked by the
	// tablet servers); a job's map outputs, kills and cleanup need the
	// job's token besides, which the worker service checks
	// (mapreduce/remote JobTokenKey) ---
	"/tabula.mapreduce.v1.Worker/RunTask":        {kind: ruleAuthenticated},
	"/tabula.mapreduce.v1.Worker/KillAttempt":    {kind: ruleAuthenticated},
	"/tabula.mapreduce.v1.Worker/FetchPartition": {kind: ruleAuthenticated},
	"/tabula.mapreduce.v1.Worker/Heartbeat":      {kind: ruleAuthenticated},
	"/tabula.mapreduce.v1.Worker/ForgetJob":      {kind: ruleAuthenticated},

	// --- the cluster's locator: where METADATA's root is, and which
	// tablet servers a client may enter through (every client needs
	// them; they hold no user data) ---
	"/tabula.cluster.v1.Locator/GetRoot":      {kind: ruleAuthenticated},
	"/tabula.cluster.v1.Locator/ListGateways": {kind: ruleAuthenticated},
}

// rule returns the rule of method.
func (g *Guard) rule(method string) rule {
	// Relayed first: this server only passes the frames on (it cannot
	// read them), and the server it relays to decides.
	for _, p := range g.cfg.Relayed {
		if strings.HasPrefix(method, p) {
			return rule{kind: ruleAuthenticated}
		}
	}
	if r, ok := rules[method]; ok {
		return r
	}
	return rule{kind: ruleSuperuser}
}

// KnownMethods returns the methods that have a rule of their own (tests
// compare it with the services' descriptors).
func KnownMethods() []string {
	var out []string
	for m := range rules {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// --- table names ---

var tablePath = regexp.MustCompile(`^(projects/[^/]+/instances/[^/]+/tables/[^/]+)(?:/.*)?$`)

// tableNameFields are the request fields that may name a table (or a
// resource under one, like an authorized view), in the order looked at.
var tableNameFields = []protoreflect.Name{"table_name", "authorized_view_name", "materialized_view_name", "resource", "name", "parent", "table", "authorized_view", "schema_bundle"}

// tableOf returns the table a request names: the first of tableNameFields
// (or the name of a message field of those, as UpdateTable's table) that is a
// table's name or a resource under it; "" if none is.
func tableOf(req any) string {
	m, ok := req.(proto.Message)
	if !ok {
		return ""
	}
	r := m.ProtoReflect()
	fields := r.Descriptor().Fields()
	for _, name := range tableNameFields {
		fd := fields.ByName(name)
		if fd == nil || fd.IsList() {
			continue
		}
		switch fd.Kind() {
		case protoreflect.StringKind:
			if t := tablePath.FindStringSubmatch(r.Get(fd).String()); t != nil {
				return t[1]
			}
		case protoreflect.MessageKind:
			if r.Has(fd) {
				if t := tableOf(r.Get(fd).Message().Interface()); t != "" {
					return t
				}
			}
		}
	}
	return ""
}

// --- checks ---

// needTable requires want on the whole table.
func needTable(want acl.Permission) func(acl.Subject, string, TableInfo, any) error {
	return func(s acl.Subject, table string, info TableInfo, _ any) error {
		if info.Policy.Allows(s, want, "") {
			return nil
		}
		return denied(table, &acl.DeniedError{Principal: s.Principal, Want: want})
	}
}

// needSome requires want on the table or on one of its families: what row
// keys, the schema or consistency tokens reveal.
func needSome(want acl.Permission) func(acl.Subject, string, TableInfo, any) error {
	return func(s acl.Subject, table string, info TableInfo, _ any) error {
		if info.Policy.AllowsSome(s, want) {
			return nil
		}
		return denied(table, &acl.DeniedError{Principal: s.Principal, Want: want})
	}
}

// readable returns the filter that keeps only the families s may read
// (nil when it may read them all), or PERMISSION_DENIED if it may read
// none.
func readable(s acl.Subject, table string, info TableInfo) (*bigtablepb.RowFilter, error) {
	allowed, all := info.Policy.Families(s, acl.Read, info.Families)
	if all {
		return nil, nil
	}
	if len(allowed) == 0 {
		return nil, denied(table, &acl.DeniedError{Principal: s.Principal, Want: acl.Read})
	}
	return FamilyFilter(allowed), nil
}

// FamilyFilter returns a RowFilter passing only the cells of families (a
// full-match regular expression of their quoted names).
func FamilyFilter(families []string) *bigtablepb.RowFilter {
	quoted := make([]string, len(families))
	for i, f := range families {
		quoted[i] = regexp.QuoteMeta(f)
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_FamilyNameRegexFilter{
		// A plain group: a family regex may not hold a colon, "(?:" neither.
		FamilyNameRegexFilter: "^(" + strings.Join(quoted, "|") + ")$",
	}}
}

// narrow returns user's filter behind visible: a chain, so that the
// user's filter (and its limits) sees only the visible cells.
func narrow(visible, user *bigtablepb.RowFilter) *bigtablepb.RowFilter {
	if visible == nil {
		return user
	}
	if user == nil {
		return visible
	}
	return &bigtablepb.RowFilter{Filter: &bigtablepb.RowFilter_Chain_{Chain: &bigtablepb.RowFilter_Chain{
		Filters: []*bigtablepb.RowFilter{visible, user},
	}}}
}

func checkReadRows(s acl.Subject, table string, info TableInfo, req any) error {
	r := req.(*bigtablepb.ReadRowsRequest)
	visible, err := readable(s, table, info)
	if err != nil {
		return err
	}
	r.Filter = narrow(visible, r.Filter)
	return nil
}

func checkScriptRun(s acl.Subject, table string, info TableInfo, req any) error {
	visible, err := readable(s, table, info)
	if err != nil || visible == nil {
		return err
	}
	// The script service is Tabula's own (scriptpb); its filter travels
	// serialized. Set it through reflection to keep the guard free of the
	// server's packages.
	m := req.(proto.Message).ProtoReflect()
	fd := m.Descriptor().Fields().ByName("filter")
	if fd == nil || fd.Kind() != protoreflect.BytesKind {
		return status.Error(codes.Internal, "guard: the script request has no filter field")
	}
	var user *bigtablepb.RowFilter
	if b := m.Get(fd).Bytes(); len(b) > 0 {
		user = &bigtablepb.RowFilter{}
		if err := proto.Unmarshal(b, user); err != nil {
			return status.Errorf(codes.InvalidArgument, "filter: not a google.bigtable.v2.RowFilter: %v", err)
		}
	}
	b, err := proto.Marshal(narrow(visible, user))
	if err != nil {
		return status.Errorf(codes.Internal, "guard: %v", err)
	}
	m.Set(fd, protoreflect.ValueOfBytes(b))
	return nil
}

// mutationFamilies returns the families mutations touch; DeleteFromRow
// touches every family of the table.
func mutationFamilies(ms []*bigtablepb.Mutation, all []string) []string {
	var out []string
	for _, m := range ms {
		switch x := m.GetMutation().(type) {
		case *bigtablepb.Mutation_SetCell_:
			out = append(out, x.SetCell.GetFamilyName())
		case *bigtablepb.Mutation_AddToCell_:
			out = append(out, x.AddToCell.GetFamilyName())
		case *bigtablepb.Mutation_MergeToCell_:
			out = append(out, x.MergeToCell.GetFamilyName())
		case *bigtablepb.Mutation_DeleteFromColumn_:
			out = append(out, x.DeleteFromColumn.GetFamilyName())
		case *bigtablepb.Mutation_DeleteFromFamily_:
			out = append(out, x.DeleteFromFamily.GetFamilyName())
		case *bigtablepb.Mutation_DeleteFromRow_:
			out = append(out, all...)
		}
	}
	return out
}

// checkWrite requires Write on every family of ms.
func checkWrite(s acl.Subject, table string, info TableInfo, ms []*bigtablepb.Mutation) error {
	if info.Policy.Allows(s, acl.Write, "") {
		return nil
	}
	if err := info.Policy.Check(s, acl.Write, mutationFamilies(ms, info.Families)); err != nil {
		return denied(table, err)
	}
	return nil
}

func checkMutateRow(s acl.Subject, table string, info TableInfo, req any) error {
	return checkWrite(s, table, info, req.(*bigtablepb.MutateRowRequest).GetMutations())
}

// checkMutateRows refuses the whole request if any entry touches a family
// the caller may not write: nothing is applied, and the status names the
// entry and the family. (Refusing only those entries would be allowed by
// the API, but a caller that lacks a grant has a configuration error, not
// a transient one; failing whole keeps it from half-applying a batch.)
func checkMutateRows(s acl.Subject, table string, info TableInfo, req any) error {
	if info.Policy.Allows(s, acl.Write, "") {
		return nil
	}
	for i, e := range req.(*bigtablepb.MutateRowsRequest).GetEntries() {
		if err := info.Policy.Check(s, acl.Write, mutationFamilies(e.GetMutations(), info.Families)); err != nil {
			return denied(table, fmt.Errorf("entries[%d]: %w", i, err))
		}
	}
	return nil
}

func checkCheckAndMutate(s acl.Subject, table string, info TableInfo, req any) error {
	r := req.(*bigtablepb.CheckAndMutateRowRequest)
	// The outcome reveals whether the predicate matched: reading it needs
	// read, on the families it can see.
	visible, err := readable(s, table, info)
	if err != nil {
		return err
	}
	if err := checkWrite(s, table, info, append(slices.Clone(r.GetTrueMutations()), r.GetFalseMutations()...)); err != nil {
		return err
	}
	r.PredicateFilter = narrow(visible, r.PredicateFilter)
	return nil
}

func checkReadModifyWrite(s acl.Subject, table string, info TableInfo, req any) error {
	var fams []string
	for _, rule := range req.(*bigtablepb.ReadModifyWriteRowRequest).GetRules() {
		fams = append(fams, rule.GetFamilyName())
	}
	// The response returns the new values: read and write.
	if err := info.Policy.Check(s, acl.Read|acl.Write, fams); err != nil {
		return denied(table, err)
	}
	return nil
}

// --- answers and response filters ---

func filterListTables(ctx context.Context, g *Guard, c *call, resp any) any {
	r, ok := resp.(*adminpb.ListTablesResponse)
	if !ok || c.su {
		return resp
	}
	out := &adminpb.ListTablesResponse{NextPageToken: r.NextPageToken}
	for _, t := range r.Tables {
		info, err := g.cfg.Tables.Lookup(ctx, t.GetName())
		if err != nil {
			continue
		}
		if info.Policy.AllowsSome(c.subject(), acl.Read) || info.Policy.AllowsSome(c.subject(), acl.Write) {
			out.Tables = append(out.Tables, t)
		}
	}
	return out
}

// answerTestIamPermissions answers TestIamPermissions from the caller's own
// grants: the permissions asked for that it holds (every known one for a
// superuser).
func answerTestIamPermissions(ctx context.Context, g *Guard, c *call, req any) (any, error) {
	r := req.(*iampb.TestIamPermissionsRequest)
	table := tableOf(r)
	if table == "" {
		return nil, status.Error(codes.InvalidArgument, "resource: not a table name (projects/P/instances/I/tables/T)")
	}
	c.table = table
	var info TableInfo
	if !c.su {
		var err error
		if info, err = g.cfg.Tables.Lookup(ctx, table); err != nil && !isNotFound(err) {
			return nil, status.Errorf(codes.Unavailable, "guard: reading the grants of %s: %v", table, err)
		}
	}
	out := &iampb.TestIamPermissionsResponse{}
	for _, p := range r.GetPermissions() {
		want, ok := acl.IAMPermission(p)
		if !ok {
			continue
		}
		if c.su || allowsIAM(info.Policy, c.subject(), want) {
			out.Permissions = append(out.Permissions, p)
		}
	}
	return out, nil
}

// allowsIAM: a table permission is held if the right is held on the table,
// or, for read and write, on some family.
func allowsIAM(p acl.Policy, s acl.Subject, want acl.Permission) bool {
	if want == acl.Admin {
		return p.Allows(s, want, "")
	}
	return p.AllowsSome(s, want)
}

func isNotFound(err error) bool { return errors.Is(err, ErrTableNotFound) }
