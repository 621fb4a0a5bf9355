"""The source policy: what a candidate's text may hold, checked as a C++ preprocessor and lexer see it, before any compiler does."""
