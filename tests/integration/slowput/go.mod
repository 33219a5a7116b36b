module dbtester.local/slowput

go 1.24
