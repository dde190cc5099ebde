int rc_gdr_placeholder;
