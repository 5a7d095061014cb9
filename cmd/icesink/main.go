// Command icesink writes upsert (CDC) streams into Apache Iceberg tables.
package main

func main() {}
