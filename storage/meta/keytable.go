package meta

// MetadataKeyTable returns the table whose tablets the METADATA rows at key
// describe: the table of a MetadataRowKey, a MetadataLookupKey or a
// MetadataTableRange bound — any key that begins with a table's two
// escaped components — and that table's range of METADATA rows
// (MetadataTableRange). ok is false for a key that does not begin with two
// whole components. It never panics.
func MetadataKeyTable(key []byte) (table TableID, start, end []byte, ok bool) {
	inst, i, err := unescapeAt(key, 0)
	if err != nil {
		return TableID{}, nil, nil, false
	}
	tab, _, err := unescapeAt(key, i)
	if err != nil {
		return TableID{}, nil, nil, false
	}
	table = TableID{Instance: string(inst), Table: string(tab)}
	start, end = MetadataTableRange(table)
	return table, start, end, true
}
