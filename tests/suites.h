/* One line per module suite; check_<module>.c defines <module>_suite(). */
LYNN_SUITE(core)
LYNN_SUITE(eval)
LYNN_SUITE(lora)
LYNN_SUITE(hub)
LYNN_SUITE(cpu)
LYNN_SUITE(model)
LYNN_SUITE(score)
