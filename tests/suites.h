/* One line per module suite; check_<module>.c defines <module>_suite(). */
LYNN_SUITE(core)
LYNN_SUITE(tok)
LYNN_SUITE(gguf)
