package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/tabuladb/tabula/mapreduce/jobs"
)

// importFamilyCheck checks, before `mr run import` starts, that table
// exists and has every family the files under in (the set prefix names,
// as jobs.ImportFamilies finds it) use: the import writes
// file by file, and a row of a missing family would fail it partway,
// other rows already written.
func importFamilyCheck(in, prefix, table string) func(context.Context, *conn) error {
	return func(ctx context.Context, c *conn) error {
		info, err := c.admin.TableInfo(ctx, table)
		if err != nil {
			return fmt.Errorf("table %q: %w", table, describe(err))
		}
		used, err := jobs.ImportFamilies(ctx, in, prefix)
		if err != nil {
			return err
		}
		var missing []string
		for _, f := range used {
			if !slices.Contains(info.Families, f) {
				missing = append(missing, f)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("table %q has no families %s that the files in %s use (create them: tabula createfamily %s FAMILY); nothing was written",
				table, strings.Join(missing, ", "), in, table)
		}
		return nil
	}
}
