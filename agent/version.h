/* agent/version.h: the agent's name and version, as its lines, user
 * agents and resources give them. */
#ifndef SS_AGENT_VERSION_H
#define SS_AGENT_VERSION_H

#define SS_VERSION "0.1.0"
#define SS_NAME "stackshot"

#endif /* SS_AGENT_VERSION_H */
