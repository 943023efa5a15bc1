package master

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"cloud.google.com/go/bigtable/admin/apiv2/adminpb"
)

// ListBackups' filter and order_by, as Cloud Bigtable documents them
// (ListBackupsRequest): a filter is restrictions `FIELD OP VALUE` over the
// fields name, source_table, state, start_time, end_time, expire_time and
// size_bytes, with the operators =, !=, <, <=, >, >= and : (has: for a
// bare value, the ID — the name's last segment — contains it; for a
// quoted one, the ID or the full name equals it),
// combined with AND, OR (which binds tighter, as in AIP-160), NOT or a
// leading -, juxtaposition (AND) and parentheses; keywords and field names
// are case-insensitive. Times are RFC 3339 (2018-03-28T14:50:00Z), sizes
// integers. order_by is a comma-separated list of those fields, each
// optionally followed by asc or desc; without one, backups come newest
// first (start_time desc), as Cloud Bigtable lists them.

// backupFilter is a parsed filter: it reports whether a backup matches.
type backupFilter func(b *adminpb.Backup) bool

// backupFields are the fields filters and orders may name.
var backupFields = []string{"name", "source_table", "state", "start_time", "end_time", "expire_time", "size_bytes"}

// parseBackupFilter parses a ListBackups filter; an error names the
// problem (the caller reports it as INVALID_ARGUMENT on `filter`). The
// empty filter matches everything.
func parseBackupFilter(s string) (backupFilter, error) {
	toks, err := lexFilter(s)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return func(*adminpb.Backup) bool { return true }, nil
	}
	p := &filterParser{toks: toks}
	f, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.pos < len(p.toks) {
		return nil, fmt.Errorf("unexpected %q at position %d", p.toks[p.pos].text, p.toks[p.pos].at)
	}
	return f, nil
}

type filterToken struct {
	text   string
	quoted bool // a "string" value
	at     int  // byte offset, for messages
}

// lexFilter splits a filter into words, quoted strings, operators and
// parentheses.
func lexFilter(s string) ([]filterToken, error) {
	var out []filterToken
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
		case c == '(' || c == ')' || c == ':':
			out = append(out, filterToken{text: string(c), at: i})
			i++
		case c == '=' || c == '!' || c == '<' || c == '>':
			if i+1 < len(s) && s[i+1] == '=' {
				out = append(out, filterToken{text: s[i : i+2], at: i})
				i += 2
				continue
			}
			if c == '!' {
				return nil, fmt.Errorf("'!' at position %d is not an operator (!= is)", i)
			}
			out = append(out, filterToken{text: string(c), at: i})
			i++
		case c == '"' || c == '\'':
			j := i + 1
			var b strings.Builder
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && j+1 < len(s) {
					j++
				}
				b.WriteByte(s[j])
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at position %d", i)
			}
			out = append(out, filterToken{text: b.String(), quoted: true, at: i})
			i = j + 1
		default:
			// A value (after an operator) may hold ':' (times); a field
			// ends at the operator.
			stop := " \t\n():=!<>\"'"
			if n := len(out); n > 0 && !out[n-1].quoted && slices.Contains([]string{"=", "!=", "<", "<=", ">", ">=", ":"}, out[n-1].text) {
				stop = " \t\n()"
			}
			j := i
			for j < len(s) && !strings.ContainsRune(stop, rune(s[j])) {
				j++
			}
			out = append(out, filterToken{text: s[i:j], at: i})
			i = j
		}
	}
	return out, nil
}

type filterParser struct {
	toks []filterToken
	pos  int
}

func (p *filterParser) peekWord(w string) bool {
	return p.pos < len(p.toks) && !p.toks[p.pos].quoted && strings.EqualFold(p.toks[p.pos].text, w)
}

// expr := sequence { AND sequence } — juxtaposition is AND too.
func (p *filterParser) expr() (backupFilter, error) {
	var terms []backupFilter
	for {
		t, err := p.disjunction()
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)
		if p.peekWord("AND") {
			p.pos++
			continue
		}
		if p.pos < len(p.toks) && p.toks[p.pos].text != ")" {
			continue // juxtaposition
		}
		break
	}
	return func(b *adminpb.Backup) bool {
		for _, t := range terms {
			if !t(b) {
				return false
			}
		}
		return true
	}, nil
}

// disjunction := term { OR term }
func (p *filterParser) disjunction() (backupFilter, error) {
	var terms []backupFilter
	for {
		t, err := p.term()
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)
		if !p.peekWord("OR") {
			break
		}
		p.pos++
	}
	return func(b *adminpb.Backup) bool {
		for _, t := range terms {
			if t(b) {
				return true
			}
		}
		return false
	}, nil
}

// term := [NOT | -] ( "(" expr ")" | restriction )
func (p *filterParser) term() (backupFilter, error) {
	if p.pos >= len(p.toks) {
		return nil, fmt.Errorf("the filter ends where a restriction was expected")
	}
	negate := false
	if p.peekWord("NOT") {
		negate = true
		p.pos++
	} else if t := p.toks[p.pos]; !t.quoted && strings.HasPrefix(t.text, "-") && len(t.text) > 1 {
		negate = true
		p.toks[p.pos].text = t.text[1:]
	}
	var f backupFilter
	var err error
	if p.pos < len(p.toks) && p.toks[p.pos].text == "(" && !p.toks[p.pos].quoted {
		p.pos++
		if f, err = p.expr(); err != nil {
			return nil, err
		}
		if p.pos >= len(p.toks) || p.toks[p.pos].text != ")" {
			return nil, fmt.Errorf("missing ')'")
		}
		p.pos++
	} else if f, err = p.restriction(); err != nil {
		return nil, err
	}
	if negate {
		inner := f
		f = func(b *adminpb.Backup) bool { return !inner(b) }
	}
	return f, nil
}

// restriction := FIELD OP VALUE
func (p *filterParser) restriction() (backupFilter, error) {
	if p.pos+3 > len(p.toks) {
		return nil, fmt.Errorf("incomplete restriction at position %d: want FIELD OP VALUE", p.toks[min(p.pos, len(p.toks)-1)].at)
	}
	field, op, val := p.toks[p.pos], p.toks[p.pos+1], p.toks[p.pos+2]
	p.pos += 3
	name := strings.ToLower(field.text)
	if field.quoted || !slices.Contains(backupFields, name) {
		return nil, fmt.Errorf("unknown field %q (filters name %s)", field.text, strings.Join(backupFields, ", "))
	}
	switch op.text {
	case "=", "!=", "<", "<=", ">", ">=", ":":
	default:
		return nil, fmt.Errorf("%q after %s is not an operator (=, !=, <, <=, >, >=, :)", op.text, field.text)
	}
	switch name {
	case "size_bytes":
		n, err := strconv.ParseInt(val.text, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("size_bytes compares with an integer, not %q", val.text)
		}
		return func(b *adminpb.Backup) bool { return compareOp(op.text, cmp.Compare(b.GetSizeBytes(), n)) }, nil
	case "start_time", "end_time", "expire_time":
		t, err := time.Parse(time.RFC3339Nano, val.text)
		if err != nil {
			return nil, fmt.Errorf("%s compares with an RFC 3339 time (2018-03-28T14:50:00Z), not %q", name, val.text)
		}
		get := map[string]func(*adminpb.Backup) time.Time{
			"start_time":  func(b *adminpb.Backup) time.Time { return b.GetStartTime().AsTime() },
			"end_time":    func(b *adminpb.Backup) time.Time { return b.GetEndTime().AsTime() },
			"expire_time": func(b *adminpb.Backup) time.Time { return b.GetExpireTime().AsTime() },
		}[name]
		return func(b *adminpb.Backup) bool { return compareOp(op.text, get(b).Compare(t)) }, nil
	case "state":
		want := strings.ToUpper(val.text)
		if _, ok := adminpb.Backup_State_value[want]; !ok {
			return nil, fmt.Errorf("unknown state %q (CREATING, READY)", val.text)
		}
		if op.text != "=" && op.text != "!=" && op.text != ":" {
			return nil, fmt.Errorf("state compares with =, != or :")
		}
		return func(b *adminpb.Backup) bool { return compareOp(op.text, strings.Compare(b.GetState().String(), want)) }, nil
	}
	// name, source_table: the full name or its last segment (the ID).
	get := func(b *adminpb.Backup) string { return b.GetName() }
	if name == "source_table" {
		get = func(b *adminpb.Backup) string { return b.GetSourceTable() }
	}
	v := val.text
	return func(b *adminpb.Backup) bool {
		full := get(b)
		id := full[strings.LastIndex(full, "/")+1:]
		if op.text == ":" {
			if val.quoted {
				return id == v || full == v
			}
			// The ID: the project, instance and cluster in the full
			// name would match most words.
			return strings.Contains(strings.ToLower(id), strings.ToLower(v))
		}
		if op.text == "=" || op.text == "!=" {
			return compareOp(op.text, boolCmp(id == v || full == v))
		}
		return compareOp(op.text, strings.Compare(id, v))
	}, nil
}

func boolCmp(equal bool) int {
	if equal {
		return 0
	}
	return 1
}

// compareOp applies op to the result c of comparing a field with a value.
func compareOp(op string, c int) bool {
	switch op {
	case "=", ":":
		return c == 0
	case "!=":
		return c != 0
	case "<":
		return c < 0
	case "<=":
		return c <= 0
	case ">":
		return c > 0
	case ">=":
		return c >= 0
	}
	return false
}

// parseBackupOrder parses order_by into a comparison of backups; an empty
// order is start_time desc. Ties are broken by name.
func parseBackupOrder(s string) (func(a, b *adminpb.Backup) int, error) {
	if strings.TrimSpace(s) == "" {
		s = "start_time desc"
	}
	type key struct {
		field string
		desc  bool
	}
	var keys []key
	for _, part := range strings.Split(s, ",") {
		words := strings.Fields(part)
		if len(words) == 0 || len(words) > 2 {
			return nil, fmt.Errorf("%q is not FIELD [asc|desc]", strings.TrimSpace(part))
		}
		k := key{field: strings.ToLower(words[0])}
		if !slices.Contains(backupFields, k.field) {
			return nil, fmt.Errorf("unknown field %q (orders by %s)", words[0], strings.Join(backupFields, ", "))
		}
		if len(words) == 2 {
			switch strings.ToLower(words[1]) {
			case "desc":
				k.desc = true
			case "asc":
			default:
				return nil, fmt.Errorf("%q after %s is neither asc nor desc", words[1], words[0])
			}
		}
		keys = append(keys, k)
	}
	return func(a, b *adminpb.Backup) int {
		for _, k := range keys {
			var c int
			switch k.field {
			case "name":
				c = strings.Compare(a.GetName(), b.GetName())
			case "source_table":
				c = strings.Compare(a.GetSourceTable(), b.GetSourceTable())
			case "state":
				c = strings.Compare(a.GetState().String(), b.GetState().String())
			case "start_time":
				c = a.GetStartTime().AsTime().Compare(b.GetStartTime().AsTime())
			case "end_time":
				c = a.GetEndTime().AsTime().Compare(b.GetEndTime().AsTime())
			case "expire_time":
				c = a.GetExpireTime().AsTime().Compare(b.GetExpireTime().AsTime())
			case "size_bytes":
				c = cmp.Compare(a.GetSizeBytes(), b.GetSizeBytes())
			}
			if k.desc {
				c = -c
			}
			if c != 0 {
				return c
			}
		}
		return strings.Compare(a.GetName(), b.GetName())
	}, nil
}
