module github.com/tabuladb/tabula

go 1.26
