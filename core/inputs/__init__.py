"""Reading the user's files: corpora, ideas, whodunits, saved readers. Every bad record is
an InputError naming file, line and field; the other records go on."""
