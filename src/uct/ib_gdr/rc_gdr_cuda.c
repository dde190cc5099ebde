/* placeholder: written in a following change */
