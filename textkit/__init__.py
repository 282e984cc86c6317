"""Text without a database: extraction of files into titled, structured text (`extract`), the
chunker, normalisation (`text`) and the lexical analysis of BM25 (`analysis`). No models, no
Django: the floor everything that reads text stands on."""
