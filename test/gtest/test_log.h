/*
 * Log lines captured instead of printed, for tests that check what the code
 * says: while a log_capture lives, every message at or above its level goes
 * to captured_log. Inline definitions: one captured_log however many files
 * of a binary include this.
 */

#ifndef RC_GDR_TEST_LOG_H_
#define RC_GDR_TEST_LOG_H_

extern "C" {
#include <ucs/config/global_opts.h>
#include <ucs/debug/log_def.h>
}

#include <stdarg.h>
#include <stdio.h>

#include <string>
#include <vector>


inline std::vector<std::string> captured_log;


inline ucs_log_func_rc_t
capture_log(const char *file, unsigned line, const char *function,
            ucs_log_level_t level, const ucs_log_component_config_t *comp,
            const char *message, va_list ap)
{
    char buf[1024];

    vsnprintf(buf, sizeof(buf), message, ap);
    captured_log.push_back(buf);
    return UCS_LOG_FUNC_RC_STOP;
}


class log_capture {
public:
    log_capture(ucs_log_level_t level = UCS_LOG_LEVEL_WARN)
    {
        m_level = ucs_global_opts.log_component.log_level;
        ucs_global_opts.log_component.log_level = level;
        captured_log.clear();
        ucs_log_push_handler(capture_log);
    }

    ~log_capture()
    {
        ucs_log_pop_handler();
        ucs_global_opts.log_component.log_level = m_level;
    }

private:
    ucs_log_level_t m_level;
};

#endif
