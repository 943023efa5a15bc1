// duckdb_check.js reads Parquet files Tabula wrote with DuckDB (npm
// @duckdb/node-api, found through NODE_PATH) and prints what DuckDB sees as
// one JSON object, for rowfile's integration test to compare with what it
// wrote.
//
//   node duckdb_check.js template FILE...   schema, row and cell counts, every cell
//   node duckdb_check.js columns FILE...    schema, row count, every value
//   node duckdb_check.js write ROWS OUT     DuckDB writes the rows of ROWS (JSON
//                                           Lines, bytes in hex) as a Parquet
//                                           file of the template's record to OUT
//
// Binary values are printed as hex, their md5 and length (large values
// stay small), BIGINTs as decimal strings.
'use strict';
const { DuckDBInstance } = require('@duckdb/node-api');

function sqlList(files) {
  return '[' + files.map((f) => "'" + f.replaceAll("'", "''") + "'").join(', ') + ']';
}

async function rows(conn, sql) {
  const reader = await conn.runAndReadAll(sql);
  return reader.getRowsJson();
}

async function main() {
  const [mode, ...files] = process.argv.slice(2);
  if (!['template', 'columns', 'write'].includes(mode) || files.length === 0 || (mode === 'write' && files.length !== 2)) {
    throw new Error('usage: duckdb_check.js template|columns FILE... | write ROWS OUT');
  }
  const instance = await DuckDBInstance.create(':memory:');
  const conn = await instance.connect();
  if (mode === 'write') {
    const [rowsFile, out] = files.map((f) => "'" + f.replaceAll("'", "''") + "'");
    await conn.run(`COPY (
      SELECT unhex(key) AS key,
        list_transform(cells, lambda c: struct_pack(family := c.family, qualifier := unhex(c.qualifier),
          "timestamp" := c."timestamp", "value" := unhex(c."value"))) AS cells
      FROM read_json(${rowsFile}, columns = {key: 'VARCHAR',
        cells: 'STRUCT(family VARCHAR, qualifier VARCHAR, "timestamp" BIGINT, "value" VARCHAR)[]'})
    ) TO ${out} (FORMAT parquet)`);
    const schema = await rows(conn, `SELECT name, type, repetition_type, converted_type FROM parquet_schema(${out})`);
    process.stdout.write(JSON.stringify({ schema }) + '\n');
    return;
  }
  const src = `read_parquet(${sqlList(files)})`;
  const out = { duckdb: (await rows(conn, 'SELECT version()'))[0][0] };
  out.describe = (await rows(conn, `DESCRIBE SELECT * FROM ${src}`)).map((r) => [r[0], r[1]]);
  out.rows = Number((await rows(conn, `SELECT count(*) FROM ${src}`))[0][0]);
  if (mode === 'template') {
    out.cells = Number((await rows(conn, `SELECT coalesce(sum(len(cells)), 0) FROM ${src}`))[0][0]);
    out.keys = await rows(conn, `SELECT hex(key), len(cells) FROM ${src} ORDER BY key`);
    out.cellRows = await rows(conn, `
      WITH u AS (SELECT key, unnest(cells) AS c FROM ${src})
      SELECT hex(key), c.family, hex(c.qualifier), c.timestamp::VARCHAR, md5(c.value), octet_length(c.value)
      FROM u ORDER BY key, c.family, c.qualifier, c.timestamp DESC`);
  } else {
    const cols = out.describe.map((d) => d[0]).filter((n) => n !== 'key');
    const sel = cols.map((c) => `CASE WHEN "${c.replaceAll('"', '""')}" IS NULL THEN NULL ELSE hex("${c.replaceAll('"', '""')}") END`);
    out.values = await rows(conn, `SELECT hex(key)${sel.map((s) => ', ' + s).join('')} FROM ${src} ORDER BY key`);
  }
  process.stdout.write(JSON.stringify(out) + '\n');
}

main().catch((err) => {
  process.stderr.write(String(err && err.stack || err) + '\n');
  process.exit(1);
});
